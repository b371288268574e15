"""Report test helpers: runs.csv fixtures whose config columns come from the real presets, metrics known."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from dllm_bench.models.loading import checkpoint_fingerprint
from dllm_bench.report.runs import compose_configs
from dllm_bench.report.tables import get_table, table_cells
from dllm_bench.runner.config import flatten

SUMMARY = ("n_samples", "n_correct", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "nfe_mean", "nfe_total",
           "steps_mean", "tokens_total", "tokens_per_forward", "tokens_per_s", "latency_s_mean",
           "wall_time_s_total", "count_rule", "world_size")


def summary(n: int, correct: int, nfe_total: int, tokens_total: int, wall: float) -> dict[str, Any]:
    """A runs.csv summary with the given counts (the other columns follow from them as the runner's do)."""
    return {"n_samples": n, "n_correct": correct, "accuracy": correct / n, "accuracy_ci_low": "",
            "accuracy_ci_high": "", "nfe_mean": nfe_total / n, "nfe_total": nfe_total, "steps_mean": nfe_total / n,
            "tokens_total": tokens_total, "tokens_per_forward": tokens_total / nfe_total,
            "tokens_per_s": tokens_total / wall, "latency_s_mean": wall / n, "wall_time_s_total": wall,
            "world_size": 1}


def write_runs(path: Path, table: str, runs: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]) -> Path:
    """runs.csv for `table`: each entry is (cell layout key, config overrides on top of the cell, summary)."""
    spec = get_table(table)
    cells = {tuple(c.row + c.col): c for c in table_cells(spec)}
    requests = []
    for key, extra, _ in runs:
        cell = cells[tuple(key)]
        requests.append((spec.preset, {**cell.overrides, **extra}))
    configs = compose_configs(requests)
    rows = []
    for i, ((_, _, metrics), cfg) in enumerate(zip(runs, configs)):
        flat = flatten(cfg)
        flat.pop("count_rule", None)
        # as the runner records it: the content fingerprint of the checkpoint the run used
        flat["model.fingerprint"] = checkpoint_fingerprint(cfg["model"]["name_or_path"])
        rows.append({"run_id": f"fixture-{i}", **flat, **metrics, "count_rule": cfg["count_rule"], "math_verify": "0.9.0"})
    columns = list(dict.fromkeys(k for row in rows for k in row))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


# Fast-dLLM++ Table 5 fixture: layout key = (row label, column label) as dllm_bench/report/table_specs/fast_dllm_pp_t5.yaml prints them.
T5_RUNS = [
    # one run: 235/300 correct, 28000 tokens in 1000 s, 12000 forwards
    (("5-shot, No cache", "Threshold"), {}, summary(300, 235, 12000, 28000, 1000.0)),
    # two seeds of the same setting: pooled 470/600, tok/s 30 and 34
    (("5-shot, PrefixCache", "Fréchet"), {"seed": 0}, summary(300, 236, 7000, 30000, 1000.0)),
    (("5-shot, PrefixCache", "Fréchet"), {"seed": 1}, summary(300, 234, 7100, 34000, 1000.0)),
    # two shards (offset 0 and 150) of one run: summed to 230/300
    (("8-shot, DualCache", "Factor"), {"offset": 0, "limit": 150}, summary(150, 116, 4000, 15000, 400.0)),
    (("8-shot, DualCache", "Factor"), {"offset": 150, "limit": 150}, summary(150, 114, 4100, 15500, 420.0)),
    # a different delta: must NOT fill the delta=0.25 cell
    (("5-shot, No cache", "Fréchet"), {"rule.delta": 0.3}, summary(300, 200, 9000, 27000, 900.0)),
]


@pytest.fixture(scope="session")
def t5_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with the Table 5 fixture runs under <tmp>/results/fast_dllm_pp_t5/runs.csv."""
    root = tmp_path_factory.mktemp("t5") / "results"
    write_runs(root / "fast_dllm_pp_t5" / "runs.csv", "fast_dllm_pp_t5", T5_RUNS)
    return root


@pytest.fixture(scope="session")
def t5_resolved(t5_results: Path):
    """Table 5 resolved against the fixture runs, keyed by layout key."""
    from dllm_bench.report.build import resolve_table
    from dllm_bench.report.runs import find_runs_csv, read_runs

    results = resolve_table(get_table("fast_dllm_pp_t5"), read_runs(find_runs_csv(t5_results)))
    return {tuple(r.cell.row + r.cell.col): r for r in results}
