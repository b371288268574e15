"""Pooling across seeds and shards, and the Wilson interval."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dllm_bench.report.aggregate import aggregate_runs, wilson_interval

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


def test_wilson_interval_known_values():
    low, high = wilson_interval(8, 10)  # textbook example: 0.490 to 0.943
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 20)[0] == 0.0 and wilson_interval(20, 20)[1] == pytest.approx(1.0)
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def _rows(*specs):
    return pd.DataFrame([
        {"run_id": f"r{i}", "seed": seed, "name": "t", "offset": off, "n_samples": n, "n_correct": c,
         "nfe_total": nfe, "tokens_total": tok, "wall_time_s_total": wall}
        for i, (seed, off, n, c, nfe, tok, wall) in enumerate(specs)
    ]).astype(str)


def test_shards_sum_and_seeds_pool():
    rows = _rows((0, 0, 50, 40, 500, 1000, 10.0), (0, 50, 50, 30, 600, 1100, 11.0),   # seed 0: two shards
                 (1, 0, 100, 60, 1200, 2400, 20.0))                                   # seed 1: whole set
    agg = aggregate_runs(rows)
    assert agg.n_repeats == 2 and agg.n_samples == 100
    assert agg.accuracy == pytest.approx(100 * 130 / 200)
    assert agg.accuracy_sd == pytest.approx(100 * pd.Series([0.7, 0.6]).std())
    assert agg.tokens_per_s == pytest.approx((2100 / 21 + 2400 / 20) / 2)
    assert agg.nfe_total == pytest.approx(1150) and agg.nfe_mean == pytest.approx(11.5)
    low, high = wilson_interval(65, 100)  # interval on one repeat's documents, not on the pooled count
    assert (agg.accuracy_ci_low, agg.accuracy_ci_high) == pytest.approx((100 * low, 100 * high))
    assert agg.run_ids == ("r0", "r1", "r2")


def test_runs_over_the_same_documents_count_once_the_largest_then_the_latest():
    rows = _rows((0, 0, 100, 60, 1200, 2400, 20.0),   # the run, under older code
                 (0, 0, 20, 20, 200, 400, 4.0),        # a limit=20 check, later
                 (0, 0, 100, 70, 1100, 2300, 19.0),    # the same setting rerun after a commit: its own run id
                 (0, 100, 50, 25, 500, 1000, 9.0))     # a disjoint shard
    rows["finished_at"] = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-01"]
    agg = aggregate_runs(rows)
    assert agg.run_ids == ("r2", "r3") and agg.n_samples == 150 and agg.n_repeats == 1
    assert agg.accuracy == pytest.approx(100 * 95 / 150)


def test_schema_errors_name_the_columns():
    with pytest.raises(ValueError, match="lack columns .*n_correct"):
        aggregate_runs(pd.DataFrame({"run_id": ["a"], "n_samples": ["1"]}))


def test_package_paths_match_across_checkouts():
    from dllm_bench.report.runs import PACKAGE_DIR, same_value

    here = str(PACKAGE_DIR / "tiny" / "checkpoints" / "tiny_llada")
    assert same_value("/elsewhere/clone/dllm_bench/tiny/checkpoints/tiny_llada", here)
    assert not same_value("/elsewhere/clone/dllm_bench/tiny/checkpoints/tiny_dream", here)
    assert not same_value("/data/LLaDA-8B-Instruct", here)


def test_forward_positions_per_document_pool_over_runs_and_need_every_run():
    rows = _rows((0, 0, 50, 40, 500, 1000, 10.0), (0, 50, 50, 30, 600, 1100, 11.0))
    assert math.isnan(aggregate_runs(rows).forward_positions_mean)  # runs from before the column
    rows["forward_positions_total"] = ["3000", "4000"]
    assert aggregate_runs(rows).forward_positions_mean == pytest.approx(7000 / 100)
    rows.loc[1, "forward_positions_total"] = ""
    assert math.isnan(aggregate_runs(rows).forward_positions_mean)
