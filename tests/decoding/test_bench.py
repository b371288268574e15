"""The benchmark script's code paths at tiny size (the GPU latency sweep included), not its speed."""

from __future__ import annotations

import pytest
import torch


def test_bench_paths_run_at_tiny_size(load_script):
    bench = load_script("bench")
    model = bench.build_model("tiny", torch.device("cpu"), torch.float32)
    lat = bench.bench_forward_latency(model, 16, [16], [1, 2], 8, repeats=1, deadline=float("inf"))
    assert sorted(lat["cache"].unique()) == ["dllm", "dual", "none", "prefix"] and (lat["forward_ms"] > 0).all()
    presets = bench.cache_presets()
    assert list(presets)[:4] == ["none", "prefix", "dual", "dllm"] and {"dkv", "sparse_dllm"} <= set(presets)
    with torch.no_grad():
        steps = bench.bench_generate(model, 1, 16, 16, 8, 4, {k: presets[k] for k in ("none", "dual", "dkv",
                                                                                  "dkv_greedy")})
        # the real-vocabulary rows time adaptive rules (their warm-up runs them too)
        adaptive = bench.timed_decode(model, bench._prompt(model, 1, 16), 16, 8, bench.build_policy("blocks"),
                                      bench.build_rule("threshold", threshold=0.9), presets["dual"])
    assert adaptive["steps"] >= 2
    assert list(steps["cache"]) == ["none", "dual", "dkv", "dkv_greedy"]
    assert list(steps["rule"]) == ["topk", "topk", "topk", "random_order"]  # greedy: its own drawn order
    assert (steps["steps"] == 4).all() and steps["outside_network_fraction"].between(0, 1).all()
    # FLOP model: dual's block-only steps compute less than no cache; dKV-Cache at two steps per block runs every
    # step in full (its steps 0 and 1), so exactly as much
    ratio = dict(zip(steps["cache"], steps["flop_ratio_vs_none"]))
    assert ratio["none"] == 1 and 0 < ratio["dual"] < 1 and ratio["dkv"] == 1
    assert (steps["step_time_over_flop_ratio"] > 0).all()


def test_the_peak_and_each_steps_share_of_it(load_script):
    """The peak is a measured dense-product rate; a step's achieved rate is its counted FLOPs over its time."""
    bench = load_script("bench")
    peak = bench.matmul_peak(torch.device("cpu"), torch.float32, (64, 256), seconds=0.2)
    assert peak["peak_gflops"] > 0 and peak["peak_shape"].count("x") == 2
    frame = bench.with_peak(bench.pd.DataFrame({"gflops_per_step": [2.0, 1.0], "step_time_ms": [1000.0, 250.0]}),
                            {"peak_gflops": 8.0, "peak_shape": "1x1x1"})
    assert list(frame["achieved_gflops"]) == [2.0, 4.0] and list(frame["fraction_of_peak"]) == [0.25, 0.5]


def test_update_replaces_the_measured_rows_and_keeps_the_others(load_script, tmp_path):
    """``--update``: a row of the same cache, rule and batch is replaced (with the new run's columns), the others
    stay; rows by batch, then in the presets' order."""
    bench = load_script("bench")
    old = bench.pd.DataFrame({"cache": ["none", "dkv", "none"], "rule": ["topk"] * 3, "batch": [1, 1, 16],
                              "step_time_ms": [1.0, 2.0, 3.0]})
    bench.write(old, "steps.csv", "cpu-mid", {"load_average_1m": 9.0}, tmp_path)
    new = bench.pd.DataFrame({"cache": ["none", "none"], "rule": ["topk"] * 2, "batch": [1, 16],
                              "step_time_ms": [4.0, 5.0], "fraction_of_peak": [0.5, 0.7]})
    bench.write(new, "steps.csv", "cpu-mid", {"load_average_1m": 1.0}, tmp_path, update=True)
    got = bench.pd.read_csv(tmp_path / "steps.csv")
    assert list(zip(got["cache"], got["batch"], got["step_time_ms"])) == [("none", 1, 4.0), ("dkv", 1, 2.0),
                                                                          ("none", 16, 5.0)]
    assert list(got["load_average_1m"]) == [1.0, 9.0, 1.0] and got["fraction_of_peak"].isna().tolist() == [
        False, True, False]


def test_bench_leaves_out_a_preset_its_loop_cannot_run(load_script):
    bench = load_script("bench")
    policy, rule = bench.build_policy("blocks"), bench.build_rule("threshold", threshold=0.9)
    assert "rule 'threshold'" in bench.runs_here(("dkv", {}), policy, rule, 16, 8)
    assert bench.runs_here(("dual", {}), policy, rule, 16, 8) is None


def test_profile_step_paths_run_at_tiny_size(load_script, capsys):
    profile_step = load_script("profile_step")
    with torch.no_grad():
        profile_step.outside_network("dual", "threshold", 32, 5, shape="tiny")
    out = capsys.readouterr().out
    assert "tiny, dual, threshold:" in out and "aten::" in out
    profile_step.linear_products(["1024x512"], [12, 20], repeats=1)
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[1] for r in rows] == ["12", "20"] and all(r[-1] == "True" for r in rows)


def test_bench_batch_refuses_an_unknown_cache_preset(load_script, capsys):
    bench_batch = load_script("bench_batch")
    with pytest.raises(SystemExit) as err:
        bench_batch.main(["--caches", "none", "dkv_greedy9"])
    assert err.value.code == 2 and "--caches dkv_greedy9: not a cache preset" in capsys.readouterr().err


def test_bench_compile_replaces_only_the_rows_it_measured(load_script, tmp_path):
    """bench_compile.py writes each row as it is measured: rows of another model, cache or batch stay in the CSV."""
    import argparse

    script = load_script("bench_compile")
    kept = script.pd.DataFrame({"model": ["tiny_llada", "cpu-mid"], "cache": ["none", "none"], "batch": [1, 16],
                                "eager_step_ms": [1.0, 2.0]})
    args = argparse.Namespace(mode="default", threads=1)
    frame = script.write([{"model": "cpu-mid", "cache": "none", "batch": 16, "eager_step_ms": 3.0}], args,
                         torch.device("cpu"), tmp_path, kept)
    got = script.pd.read_csv(tmp_path / "compiled_steps_cpu.csv")
    assert list(zip(got["model"], got["batch"], got["eager_step_ms"])) == [("tiny_llada", 1, 1.0), ("cpu-mid", 16, 3.0)]
    assert len(frame) == 2 and got["threads"].iloc[1] == 1  # the run's own columns on its rows


def test_moe_bench_times_both_dispatches_and_counts_the_loops_host_reads(load_script, tmp_path):
    """bench_moe at a small width: the grouped dispatch reads nothing on the host, the loop it replaced reads twice
    a layer (bincount's size and .tolist()), and both give the same mixture (the script checks it)."""
    frame = load_script("bench_moe").main(["--scale", "16", "--tokens", "8", "40", "--repeats", "1",
                                           "--out", str(tmp_path)])
    assert list(frame["tokens"]) == [8, 40] and (tmp_path / "moe_layer_cpu.csv").exists()
    assert (frame["host_reads"] == 0).all() and (frame["looped_host_reads"] == 2).all()
    assert (frame[["moe_ms", "looped_ms", "dense_ms"]] > 0).all().all()
