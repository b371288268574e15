"""scripts/gpu_check.py runs end to end at a tiny shape on CPU (its code paths, not its speed)."""

from __future__ import annotations

import json

import pandas as pd

from dllm_bench.report.estimate import read_speedups


def test_gpu_check_runs_on_cpu_at_a_tiny_shape(load_script, tmp_path):
    gpu_check = load_script("gpu_check")
    summary = gpu_check.main(["--device", "cpu", "--tiny", "--out", str(tmp_path), "--prompt", "24",
                              "--answers", "16", "--forward-batches", "1", "2", "--generate-batches", "1", "2",
                              "--gen", "16", "--block", "8", "--repeats", "1", "--agreement-rows", "3"])
    assert json.loads((tmp_path / "gpu_summary.json").read_text()) == summary
    for shape in ("dream-7b", "llada-8b"):
        fwd = pd.read_csv(tmp_path / f"gpu_forward_{shape}.csv")
        assert set(fwd["cache"]) == {"none", "prefix", "dual", "dllm"} and (fwd["forward_ms"] > 0).all()
        gen = pd.read_csv(tmp_path / f"gpu_generate_{shape}.csv")
        assert list(gen["batch"]) == [1, 2] and (gen["tokens_per_s"] > 0).all()
    speedups = read_speedups(tmp_path)  # what reproduce_table.py --estimate reads from these files
    assert speedups.source == "gpu" and set(speedups.by_shape) == {"dream-7b", "llada-8b"} and speedups.batches() == [2]
    for s in summary["shapes"]:
        assert s["skipped"] == [] and 0 <= s["batched_vs_alone_token_agreement"] <= 1
        assert s["sdpa"]["accepted_ms"] and s["parameters"] > 126464 * 64  # the real vocabulary
