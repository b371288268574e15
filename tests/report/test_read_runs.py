"""Runs read from several runs.csv files: a key one file records and another does not is compared only for the rows
of the file that records it (a runs.csv written before the runner recorded a key still fills its cells)."""

from __future__ import annotations

import pandas as pd

from dllm_bench.report.runs import matching_rows, read_runs

CONFIG = {"policy": {"name": "blocks"}, "rule": {"name": "topk"}, "cache": {"name": "none"},
          "model": {"compile": False}, "gen_length": 24}


def _write(path, rows):
    path.parent.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_a_key_absent_from_a_rows_own_file_is_not_compared(tmp_path):
    old = _write(tmp_path / "old" / "runs.csv", [{"run_id": "a", "policy.name": "blocks", "rule.name": "topk",
                                                 "cache.name": "none", "gen_length": "24"}])
    new = _write(tmp_path / "new" / "runs.csv", [
        {"run_id": "b", "policy.name": "blocks", "rule.name": "topk", "cache.name": "none", "gen_length": "24",
         "model.compile": "True"},
        {"run_id": "c", "policy.name": "blocks", "rule.name": "topk", "cache.name": "none", "gen_length": "24",
         "model.compile": "False"}])
    runs = read_runs([old, new])
    assert sorted(matching_rows(runs, CONFIG)["run_id"]) == ["a", "c"]  # b recorded another value
    assert sorted(matching_rows(runs, {**CONFIG, "gen_length": 32})["run_id"]) == []
    assert list(matching_rows(read_runs([new]), CONFIG)["run_id"]) == ["c"]


def test_a_file_without_the_decoding_groups_never_matches(tmp_path):
    old = _write(tmp_path / "old" / "runs.csv", [{"run_id": "a", "gen_length": "24"}])
    new = _write(tmp_path / "new" / "runs.csv", [{"run_id": "b", "policy.name": "blocks", "rule.name": "topk",
                                                 "cache.name": "none", "gen_length": "24"}])
    assert list(matching_rows(read_runs([old, new]), CONFIG)["run_id"]) == ["b"]
