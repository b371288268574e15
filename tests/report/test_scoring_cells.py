"""A cell is filled from the scoring mode its preset names; the other mode's accuracy shows where it differs."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from dllm_bench.report.build import resolve_table
from dllm_bench.report.render import to_markdown
from dllm_bench.report.runs import find_runs_csv, read_runs
from dllm_bench.report.tables import get_table

from .conftest import summary, write_runs

KEY = ("5-shot, No cache", "Threshold")


def _resolve(tmp_path, runs, extra_rows=()):
    path = write_runs(tmp_path / "results" / "fast_dllm_pp_t5" / "runs.csv", "fast_dllm_pp_t5", runs)
    if extra_rows:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        frame = pd.concat([frame, pd.DataFrame(extra_rows)], ignore_index=True).fillna("")
        frame.to_csv(path, index=False, quoting=csv.QUOTE_MINIMAL)
    spec = get_table("fast_dllm_pp_t5")
    results = resolve_table(spec, read_runs(find_runs_csv(tmp_path / "results")))
    return spec, results, {tuple(r.cell.row + r.cell.col): r for r in results}


def test_paper_cell_shows_lm_eval_where_it_differs(tmp_path):
    spec, results, by_key = _resolve(tmp_path, [
        (KEY, {}, summary(300, 235, 12000, 28000, 1000.0)),  # the preset's mode (paper)
        (KEY, {"task.scoring": "lm_eval"}, summary(300, 250, 12000, 28000, 1000.0)),
    ])
    cell = by_key[KEY]
    assert cell.aggregate.accuracy == pytest.approx(100 * 235 / 300) and cell.config["task"]["scoring"] == "paper"
    assert cell.other[0] == "lm_eval" and cell.other[1].accuracy == pytest.approx(100 * 250 / 300)
    text = to_markdown(spec, results)
    assert "(lm_eval 83.3" in text and "other `task.scoring` mode" in text and "`task.scoring=paper`" in text


def test_equal_accuracy_shows_once_and_a_rescored_twin_is_not_pooled(tmp_path):
    spec, results, by_key = _resolve(tmp_path, [
        (KEY, {}, summary(300, 235, 12000, 28000, 1000.0)),
        (KEY, {"task.scoring": "lm_eval"}, summary(300, 235, 12000, 28000, 1000.0)),
    ])
    assert by_key[KEY].other is not None and "(lm_eval" not in to_markdown(spec, results)
    path = tmp_path / "results" / "fast_dllm_pp_t5" / "runs.csv"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    twin = frame.iloc[0].to_dict() | {"run_id": "fixture-0.paper", "generation_run_id": "fixture-0",
                                      "rescored_from": "fixture-1"}
    _, _, by_key = _resolve(tmp_path / "again", [(KEY, {}, summary(300, 235, 12000, 28000, 1000.0))], [twin])
    assert by_key[KEY].aggregate.n_samples == 300 and by_key[KEY].aggregate.run_ids == ("fixture-0",)
