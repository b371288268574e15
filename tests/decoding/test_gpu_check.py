"""scripts/gpu_check.py runs end to end on the CPU in bf16 at a mid shape (its code paths, not its speed), and its
tiny-checkpoint check reproduces the CPU's recorded tokens: every row where they were recorded (machine and kernel
width), the near-tie-free rows elsewhere."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from dllm_bench.models import MoEDiffusionLM, load_model
from dllm_bench.report.estimate import read_speedups
from tests.machine import recording

RECORDED = recording("gpu_check_tiny_tokens.json")


@pytest.mark.slow
def test_gpu_check_times_the_compiled_stack_beside_eager(load_script):
    """compiled_speed on a one-layer LLaDA-8B shape, the stack traced by dynamo's tracing-only backend (the
    same ops: the tokens agree exactly in float32) and put back to eager afterwards."""
    gpu_check = load_script("gpu_check")
    from dllm_bench.models.compiled import CompiledLayers

    torch._dynamo.reset()
    network = gpu_check.build_model("llada-8b", torch.device("cpu"), torch.float32, 1, 128)
    stack = CompiledLayers(network, "default", backend="eager", fullgraph=True)
    row = gpu_check.compiled_speed(network, stack, 2, 16, 8, 8, padded=True)
    assert row["token_agreement"] == 1.0 and row["compile_s"] > 0 and row["speedup"] > 0
    assert row["batch"] == 2 and row["padded"] and set(row) | {"shape"} == set(gpu_check.COMPILED_COLUMNS)
    assert network.layer_stack is None  # eager again


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_in_bf16_at_a_mid_shape(load_script, tmp_path):
    gpu_check = load_script("gpu_check")
    summary = gpu_check.main(["--device", "cpu", "--dtype", "bfloat16", "--layers", "1", "--width", "128",
                              "--out", str(tmp_path), "--prompt", "24", "--answers", "16", "--forward-batches", "1",
                              "2", "--generate-batches", "1", "2", "--gen", "16", "--block", "8", "--big-batch", "2",
                              "--big-prompt", "32", "--big-gen", "16", "--repeats", "1", "--agreement-rows", "3",
                              "--tiny-rows", "2", "--budget-s", "100000"])  # its code paths, whatever the load
    assert json.loads((tmp_path / "gpu_summary.json").read_text()) == json.loads(json.dumps(summary))
    assert [s["shape"] for s in summary["shapes"]] == ["llada-8b", "dream-7b", "llada-moe-7b"]  # LLaDA first
    assert [s["network"] for s in summary["shapes"]] == ["DiffusionLM", "DiffusionLM", "MoEDiffusionLM"]
    for shape in ("dream-7b", "llada-8b", "llada-moe-7b"):
        fwd = pd.read_csv(tmp_path / f"gpu_forward_{shape}.csv")
        assert set(fwd["cache"]) == {"none", "prefix", "dual", "dllm"} and set(fwd["mask"]) == {True, False}
        assert (fwd["forward_ms"] > 0).all()
        sdpa = pd.read_csv(tmp_path / f"gpu_sdpa_{shape}.csv")
        assert set(sdpa["call"]) == {"full", "prefix_step", "dual_step"}
        assert set(sdpa.loc[sdpa["call"] == "dual_step", "queries"]) == {8}
        assert sdpa["accepted"].any() and not sdpa["default"].str.startswith("unknown").any()
        gen = pd.read_csv(tmp_path / f"gpu_generate_{shape}.csv")
        assert list(gen["batch"]) == [1, 1, 2, 2] and list(gen["padded"]) == [False, True] * 2
        assert (gen["tokens_per_s"] > 0).all()
        # compiled beside eager: off on the CPU by default (minutes of C++ compilation), a header-only file
        assert list(pd.read_csv(tmp_path / f"gpu_compiled_{shape}.csv").columns) == gpu_check.COMPILED_COLUMNS
    speedups = read_speedups(tmp_path)  # what reproduce_table.py --estimate reads from these files
    assert speedups.source == "gpu" and set(speedups.by_shape) == {"dream-7b", "llada-8b", "llada-moe-7b"} and speedups.batches() == [2]
    for s in summary["shapes"]:
        assert s["dtype"] == "bfloat16" and s["layers"] == 1 and s["width"] == 128
        assert s["skipped"] == [] and s["stopped"] == []
        assert 0 <= s["batched_vs_alone_token_agreement"] <= 1 and s["big_decode"]["batch"] == 2
        assert s["parameters"] > 126464 * 128  # the real vocabulary
    tiny = summary["tiny_checkpoints_vs_cpu"]
    # the recording machine and width: float32 and bf16 give the recorded tokens exactly (a GPU reports its own
    # rates); elsewhere the recorded rows free of near-ties do
    _, compared, source = gpu_check.cpu_reference(json.loads(gpu_check.TINY_FIXTURE.read_text()))
    assert tiny["reference"] == source
    rows = {s: 2 if compared is None else len([r for r in compared[s] if r < 2]) for s in tiny["float32"]}
    assert sum(rows.values()) >= 4  # most rows are compared either way
    for per in (tiny["float32"], tiny["bfloat16"]):
        assert all(v["rows"] == rows[s] and v["tokens"] == (1.0 if rows[s] else None) for s, v in per.items())


@pytest.mark.slow
def test_moe_shape_at_full_size_has_the_model_cards_parameters(load_script):
    """The assumed LLaDA-MoE shape built on the meta device: the MoE network, 7.36 B parameters (the model card's
    "7B total"; 3000+ modules, about 40 s on a loaded 2-core machine)."""
    full = load_script("gpu_check").build_model("llada-moe-7b", torch.device("meta"), torch.bfloat16, None, None)
    assert isinstance(full, MoEDiffusionLM) and 7.3e9 < full.num_parameters() < 7.4e9


def test_moe_shape_resizes_to_the_moe_network(load_script):
    """Resized as the CPU test runs it, the LLaDA-MoE shape is still the MoE network: every layer MoE with its 64
    experts, the expert size scaled with the width, the real-size vocabulary."""
    gpu_check = load_script("gpu_check")
    model = gpu_check.build_model("llada-moe-7b", torch.device("cpu"), torch.float32, 2, 128)
    assert isinstance(model, MoEDiffusionLM)
    cfg = model.config
    assert (cfg.n_layers, cfg.d_model, cfg.moe_layer_freq, cfg.num_experts) == (2, 128, [1, 1], 64)
    assert cfg.expert_intermediate_size == 64 and cfg.vocab_size == 157184 and cfg.qk_layernorm
    with torch.no_grad():
        logits = model(torch.randint(0, 1000, (1, 40)), logits_range=(30, 40))
    assert logits.shape == (1, 10, 157184) and torch.isfinite(logits).all()


def test_each_phase_gets_its_share_of_what_is_left(load_script, monkeypatch):
    """Phase i of n starts with (what the budget has left) / (n - i): a phase that overran costs every later phase
    alike, and one that finished early passes its time on."""
    gpu_check = load_script("gpu_check")
    monkeypatch.setattr(gpu_check.time, "perf_counter", lambda: 100.0)
    assert gpu_check.phase_deadline(0.0, 400.0, 0, 4) == 100.0 + 300.0 / 4  # 100 s spent before the first phase
    assert gpu_check.phase_deadline(0.0, 400.0, 2, 4) == 100.0 + 300.0 / 2
    assert gpu_check.phase_deadline(0.0, 50.0, 1, 4) == 100.0  # the budget is spent: nothing new starts


def test_a_measurement_past_its_deadline_stops_at_the_next_forward(load_script, tmp_path):
    """The deadline is enforced between steps: a decode still running at its phase's end raises at its next forward,
    and a phase whose deadline has passed records every step as skipped, with header-only CSVs."""
    gpu_check = load_script("gpu_check")
    args = gpu_check.parse_args(["--device", "cpu", "--layers", "1", "--width", "64", "--prompt", "24", "--answers", "16",
                                 "--forward-batches", "1", "--generate-batches", "1", "--gen", "16", "--block", "8",
                                 "--big-batch", "1", "--big-prompt", "24", "--big-gen", "16", "--repeats", "1",
                                 "--agreement-rows", "2"])
    model = gpu_check.build_model("llada-8b", torch.device("cpu"), torch.float32, 1, 64)
    late = gpu_check.DeadlineNetwork(model, deadline=0.0)
    with pytest.raises(gpu_check.DeadlineReached):
        gpu_check.generate_speed(late, 1, 24, 16, 8)
    summary = gpu_check.check_shape("llada-8b", args, torch.device("cpu"), torch.float32, 0.0, tmp_path)
    assert summary["stopped"] == [] and len(summary["skipped"]) == 8 + 1 + 2 + 1 + 1
    assert pd.read_csv(tmp_path / "gpu_generate_llada-8b.csv").empty
    # the tiny checkpoints' phase too: past its deadline every setting is skipped, in both dtypes
    tiny = gpu_check.tiny_agreement(torch.device("cpu"), 1, deadline=0.0)
    assert tiny["stopped"] == [] and len(tiny["skipped"]) == 2 * len(gpu_check.TINY_SETTINGS)
    assert tiny["float32"] == tiny["bfloat16"] == {}


def test_a_cpu_compares_every_row_where_recorded_and_the_near_tie_free_ones_elsewhere(load_script, monkeypatch):
    gpu_check = load_script("gpu_check")
    fixture = json.loads(gpu_check.TINY_FIXTURE.read_text())
    assert fixture["machine"] == RECORDED.machine  # the manifest and the fixture agree on where it was recorded
    reference, compared, source = gpu_check.cpu_reference(fixture)
    assert (compared is None) == RECORDED.here() and (source == "recorded here") == RECORDED.here()
    monkeypatch.setenv("DLLM_BENCH_FOREIGN_MACHINE", "1")
    reference, compared, source = gpu_check.cpu_reference(fixture)
    assert source == "near-tie-free rows of the recording machine" and compared == fixture["near_tie_free"]
    # a near-tie-free row decodes the same under every recorded width, in float32 and bf16
    widths = [fixture["tokens"], *fixture["cpu_capability_tokens"].values()]
    for setting, rows in compared.items():
        assert 0 < len(rows) < len(fixture["prompts"]["llada"])  # some rows cross a near-tie: left out
        assert all(w[dt][setting][r] == widths[0]["float32"][setting][r] for w in widths
                   for dt in ("float32", "bfloat16") for r in rows)
    # a run recorded on this (foreign) machine and width is compared on every row
    fixture["other_machines"] = [{"machine": gpu_check.fingerprint(), "capability": gpu_check.cpu_capability(),
                                  "tokens": fixture["tokens"]}]
    assert gpu_check.cpu_reference(fixture)[1:] == (None, "recorded here")


def test_a_skipped_step_leaves_a_csv_with_its_header(load_script, tmp_path):
    gpu_check = load_script("gpu_check")
    gpu_check.write_csv([], gpu_check.GENERATE_COLUMNS, tmp_path / "gpu_generate_llada-8b.csv")
    assert list(pd.read_csv(tmp_path / "gpu_generate_llada-8b.csv").columns) == gpu_check.GENERATE_COLUMNS
    assert read_speedups(tmp_path) is None  # no rows: no speed-up, and no EmptyDataError


@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_tiny_checkpoints_load_without_tokenizer_or_safetensors_as_load_model(load_script, flavour):
    gpu_check = load_script("gpu_check")
    ours = gpu_check.load_tiny(flavour, torch.device("cpu"), torch.float32).state_dict()
    ref = load_model(gpu_check.CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype="float32").state_dict()
    assert ours.keys() == ref.keys() and all(torch.equal(ours[k], ref[k]) for k in ref)


def test_bad_arguments_exit_2_before_any_work(load_script, capsys):
    gpu_check = load_script("gpu_check")
    with pytest.raises(SystemExit) as err:
        gpu_check.main(["--device", "cpu", "--gen", "20", "--block", "8"])
    assert err.value.code == 2 and "--gen 20" in capsys.readouterr().err


BLOCKER = """
import sys, importlib.abc
BLOCKED = {"transformers", "tokenizers", "safetensors", "hydra", "omegaconf", "yaml", "huggingface_hub"}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("not on the GPU machine: " + name)
sys.meta_path.insert(0, Blocker())
import runpy, torch
mod = runpy.run_path("scripts/gpu_check.py", run_name="gpu_check")
model = mod["load_tiny"]("dream", torch.device("cpu"), torch.float32)
print("ok", model.config.flavour)
"""


def test_gpu_check_needs_no_package_beyond_torch_numpy_pandas():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", BLOCKER], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok dream", done.stderr[-2000:]
