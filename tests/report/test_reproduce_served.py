"""A paper table from a served engine: `make reproduce-table TABLE=... backend=sglang backend.url=...` hands the
overrides to every cell (`--set`), a served cell runs against the shipped server and fills only the served table
(never the local one, and a local run never a served cell). docs/backends.md."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pandas as pd
import pytest

from dllm_bench.report.build import resolve_table
from dllm_bench.report.runs import find_runs_csv, matching_rows, read_runs
from dllm_bench.report.tables import get_table
from dllm_bench.runner.config import REPO_DIR
from tests.runner.test_served import Server

CELL = (("Threshold tau=0.9",), ("No cache",))


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_reproduce_table_forwards_the_overrides(load_script):
    out = subprocess.run(["make", "-n", "--no-print-directory", "reproduce-table", "TABLE=tiny", "backend=sglang",
                          "backend.url=http://gpu-host:30000", "model.name_or_path=/data/LLaDA 8B", "TORCH_SPEC=x"],
                         cwd=REPO_DIR, capture_output=True, text=True, check=True, timeout=60).stdout
    line = next(x for x in reversed(out.splitlines()) if "scripts/reproduce_table.py" in x)
    argv = shlex.split(line)
    args = load_script("reproduce_table").parse_args(argv[argv.index("scripts/reproduce_table.py") + 1:])
    assert args.table == "tiny"
    assert args.extra == {"backend": "sglang", "backend.url": "http://gpu-host:30000",
                          "model.name_or_path": "/data/LLaDA 8B"}  # make's own variables stay make's
    plain = subprocess.run(["make", "-n", "--no-print-directory", "reproduce-table", "TABLE=tiny"], cwd=REPO_DIR, capture_output=True,
                           text=True, check=True, timeout=60).stdout
    assert plain.rstrip().endswith("scripts/reproduce_table.py --table tiny")


def test_a_served_table_runs_gpu_cells_without_a_gpu(load_script):
    script = load_script("reproduce_table")
    assert script.served_backend({"backend": "sglang"}) and not script.served_backend({})
    assert not script.served_backend({"backend": "local"})


def runs_frame(rows: list[dict]) -> pd.DataFrame:
    base = {"policy.name": "blocks", "rule.name": "threshold", "cache.name": "none"}
    return pd.DataFrame([{**base, **r} for r in rows]).fillna("")


def test_rows_match_the_cells_backend():
    runs = runs_frame([{"run_id": "local"},
                       {"run_id": "s1", "backend.name": "sglang", "server_url": "http://a:1", "server_model": "m"},
                       {"run_id": "s2", "backend.name": "sglang", "server_url": "http://b:1", "server_model": "n"},
                       {"run_id": "o1", "backend.name": "openai", "server_url": "http://a:1", "server_model": "m"}])
    cell = {"policy": {"name": "blocks"}, "rule": {"name": "threshold"}, "cache": {"name": "none"}}

    def ids(backend: dict | None) -> list[str]:
        return list(matching_rows(runs, {**cell, **({"backend": backend} if backend else {})})["run_id"])

    assert ids(None) == ids({"name": "local"}) == ["local"]
    # any server of the backend (one per decoding setting), or the one serving the named model
    assert ids({"name": "sglang", "url": "http://c:1", "model": None}) == ["s1", "s2"]
    assert ids({"name": "sglang", "url": "http://c:1", "model": "n"}) == ["s2"]
    assert ids({"name": "openai", "url": "http://a:1", "model": None}) == ["o1"]
    # a runs.csv that never held a served run: its rows are local
    assert list(matching_rows(runs_frame([{"run_id": "old"}]), cell)["run_id"]) == ["old"]
    assert matching_rows(runs_frame([{"run_id": "old"}]), {**cell, "backend": {"name": "sglang"}}).empty


def test_a_served_cell_fills_the_served_table_only(tmp_path, load_script):
    script = load_script("reproduce_table")
    spec = get_table("tiny")
    results_dir = tmp_path / "results"
    cell_overrides = next(r.cell.overrides for r in resolve_table(spec, pd.DataFrame()) if r.cell.layout == CELL)
    server = Server(f"experiment={spec.preset}", *(f"{k}={v}" for k, v in cell_overrides.items()))
    try:
        extra = {"backend": "sglang", "backend.url": server.url}
        cell = {r.cell.layout: r for r in resolve_table(spec, pd.DataFrame(), extra=extra)}[CELL]
        assert cell.status == "missing" and f"backend.url={server.url}" in cell.command
        assert script.run_cell(spec, cell, results_dir, limit=4)
    finally:
        server.stop()
    runs = read_runs(find_runs_csv(results_dir))
    served = {r.cell.layout: r for r in resolve_table(spec, runs, extra=extra)}
    assert served[CELL].status == "ok" and served[CELL].aggregate.n_samples == 4
    assert sum(r.status == "ok" for r in served.values()) == 1
    local = {r.cell.layout: r for r in resolve_table(spec, runs)}
    assert local[CELL].status == "missing"  # the server's run is not the local engine's
    local_cell = local[CELL]
    assert script.run_cell(spec, local_cell, results_dir, limit=4)
    runs = read_runs(find_runs_csv(results_dir))
    filled = {r.cell.layout: r for r in resolve_table(spec, runs)}[CELL]
    assert filled.status == "ok" and filled.aggregate.run_ids != served[CELL].aggregate.run_ids
    again = {r.cell.layout: r for r in resolve_table(spec, runs, extra=extra)}[CELL]
    assert again.aggregate.run_ids == served[CELL].aggregate.run_ids  # each table keeps its own run
