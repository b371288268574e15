"""`reproduce_table.py` runs a missing tiny cell through the runner and the table fills from that real run."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

from dllm_bench.models.tiny_format import make_random_checkpoint
from dllm_bench.report.build import resolve_table
from dllm_bench.report.profile import analyse_profiles, read_trace_steps
from dllm_bench.report.runs import find_runs_csv, read_runs
from dllm_bench.report.tables import get_table


def test_tiny_cell_runs_through_the_runner_and_fills_its_cell(tmp_path, load_script):
    script = load_script("reproduce_table")
    checkpoint = make_random_checkpoint(tmp_path / "tiny_llada", "llada", seed=0)
    extra = {"model.name_or_path": str(checkpoint)}
    spec = get_table("tiny")
    results_dir = tmp_path / "results"
    before = {r.cell.layout: r for r in resolve_table(spec, pd.DataFrame(), extra=extra)}
    cell = before[(("Fréchet delta=0.25",), ("No cache",))]
    assert cell.status == "missing" and "model.name_or_path=" in cell.command

    assert script.run_cell(spec, cell, results_dir, limit=4)

    after = {r.cell.layout: r for r in resolve_table(spec, read_runs(find_runs_csv(results_dir)), extra=extra)}
    filled = after[(("Fréchet delta=0.25",), ("No cache",))]
    assert filled.status == "ok" and filled.aggregate.n_samples == 4
    assert sum(r.status == "ok" for r in after.values()) == 1
    row = read_runs(find_runs_csv(results_dir)).iloc[0]
    assert filled.aggregate.nfe_total == float(row["nfe_total"])
    # the traced Fréchet run's commits are exactly what the Fréchet rule gives on its own profiles
    traces = sorted(results_dir.glob("tiny_table/*/traces.jsonl"))
    analysis = analyse_profiles(read_trace_steps(traces), delta=0.25)
    assert (analysis.commits["observed"] == analysis.commits["frechet"]).all()
    # a fresh clone touches every file: same weights, still the same cell
    later = time.time() + 60
    for weights in Path(checkpoint).glob("*.safetensors"):
        os.utime(weights, (later, later))
    touched = {r.cell.layout: r for r in resolve_table(spec, read_runs(find_runs_csv(results_dir)), extra=extra)}
    assert touched[(("Fréchet delta=0.25",), ("No cache",))].status == "ok"
    # retrained weights: the old run must not fill the cell
    make_random_checkpoint(checkpoint, "llada", seed=1)
    stale = {r.cell.layout: r for r in resolve_table(spec, read_runs(find_runs_csv(results_dir)), extra=extra)}
    assert stale[(("Fréchet delta=0.25",), ("No cache",))].status == "unavailable"
    assert stale[(("Fréchet delta=0.25",), ("No cache",))].reason.startswith("stale: these runs used other weights")
