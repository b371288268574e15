"""The benchmark script's code paths at tiny size (the GPU latency sweep included), not its speed."""

from __future__ import annotations

import torch


def test_bench_paths_run_at_tiny_size(load_script):
    bench = load_script("bench")
    model = bench.build_model("tiny", torch.device("cpu"), torch.float32)
    lat = bench.bench_forward_latency(model, 16, [16], [1, 2], 8, repeats=1, deadline=float("inf"))
    assert sorted(lat["cache"].unique()) == ["dllm", "dual", "none", "prefix"] and (lat["forward_ms"] > 0).all()
    with torch.no_grad():
        steps = bench.bench_generate(model, 1, 16, 16, 8, 4)
    assert list(steps["cache"]) == ["none", "prefix", "dual", "dllm"]
    assert (steps["steps"] == 4).all() and steps["outside_network_fraction"].between(0, 1).all()
    # FLOP model: a dual step (block only) costs less than a full forward
    assert bench.layer_flops(model.config, 8, 32) < bench.layer_flops(model.config, 32, 32)


def test_profile_step_paths_run_at_tiny_size(load_script, capsys):
    profile_step = load_script("profile_step")
    with torch.no_grad():
        profile_step.outside_network("dual", "threshold", 32, 5, shape="tiny")
    out = capsys.readouterr().out
    assert "tiny, dual, threshold:" in out and "aten::" in out
    profile_step.linear_products(["1024x512"], [12, 20], repeats=1)
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[1] for r in rows] == ["12", "20"] and all(r[-1] == "True" for r in rows)
