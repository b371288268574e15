"""Front extraction, hypervolume and AUP (dllm_bench/report/frontier.py) against independent references, and the
report written from a search's SQLite study."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.report.frontier import Study, aup, hypervolume, markdown, outside_runs, summarise_fronts
from dllm_bench.report.pareto import dominating, pareto_front
from dllm_bench.runner.summary import wilson_interval

# Small integer grids make ties (equal accuracy or equal NFE, duplicate runs) frequent.
points = st.lists(st.tuples(st.integers(0, 10), st.integers(1, 24)), min_size=1, max_size=7)


def brute_front(pts: list[tuple[float, float]]) -> set[tuple[float, float]]:
    """(accuracy, nfe) pairs that no other pair dominates (>= accuracy and <= nfe, better in one), by definition."""
    def dominated(p):
        return any(q[0] >= p[0] and q[1] <= p[1] and q != p for q in pts)

    return {p for p in pts if not dominated(p)}


def union_area(pts: list[tuple[float, float]], ref_nfe: float) -> float:
    """Area of the union of the rectangles [0, 1 - nfe/ref] x [0, accuracy], by inclusion-exclusion over subsets."""
    boxes = [(max(0.0, 1 - n / ref_nfe), a) for a, n in pts]
    total = 0.0
    for k in range(1, len(boxes) + 1):
        for subset in itertools.combinations(boxes, k):
            total += (-1) ** (k + 1) * min(b[0] for b in subset) * min(b[1] for b in subset)
    return total


@settings(max_examples=200, deadline=None)
@given(points)
def test_front_is_the_set_of_non_dominated_runs(pts):
    acc = np.array([p[0] for p in pts], dtype=float)
    nfe = np.array([p[1] for p in pts], dtype=float)
    idx = pareto_front(nfe, acc, larger_x_better=False)
    assert {(acc[i], nfe[i]) for i in idx} == brute_front([(float(a), float(n)) for a, n in pts])
    assert len(idx) == len({(acc[i], nfe[i]) for i in idx})  # duplicates of a front run appear once
    assert list(nfe[idx]) == sorted(nfe[idx])  # cheapest first
    undominated = {(acc[i], nfe[i]) for i in range(len(pts)) if not dominating(nfe, acc, nfe[i], acc[i], False).any()}
    assert undominated == {(acc[i], nfe[i]) for i in idx}  # the one dominance test agrees with the front


@settings(max_examples=200, deadline=None)
@given(points, st.sampled_from([12.0, 24.0, 30.0]))
def test_hypervolume_is_the_union_of_dominated_boxes(pts, ref):
    acc = np.array([p[0] / 10 for p in pts])
    nfe = np.array([p[1] for p in pts], dtype=float)
    assert hypervolume(acc, nfe, ref) == pytest.approx(union_area(list(zip(acc, nfe)), ref), abs=1e-12)


def test_hypervolume_by_hand():
    # runs (accuracy, NFE) with ref 10: (0.5, 2) saves 0.8, (0.9, 6) saves 0.4; a dominated run and one past ref
    acc, nfe = np.array([0.5, 0.9, 0.4, 1.0]), np.array([2.0, 6.0, 7.0, 12.0])
    assert hypervolume(acc, nfe, 10.0) == pytest.approx(0.8 * 0.5 + 0.4 * (0.9 - 0.5))
    assert hypervolume(np.array([1.0]), np.array([0.0]), 10.0) == 1.0
    assert hypervolume(np.array([1.0]), np.array([10.0]), 10.0) == 0.0


def aup_by_definition(rho, y, y_max, alpha=3.0, window=5.0):
    """d3LLM's AUP written out term by term from its definition."""
    pairs = sorted(zip(rho, y), key=lambda p: p[0])
    kept = [p for p in pairs if p[1] >= pairs[0][1] - window]

    def w(v):
        return min(math.exp(-alpha * (1 - v / y_max)), 1.0)

    total = kept[0][0] * kept[0][1]
    for (r0, y0), (r1, y1) in zip(kept, kept[1:]):
        total += 0.5 * (r1 - r0) * (y1 * w(y1) + y0 * w(y0))
    return total


# Produced by d3LLM's own get_aup (hao-ai-lab/d3LLM e5bfcac, AUP_leaderboard/aup_utils.py) on its
# data_llada.yaml, y_max = the task's best accuracy over all methods:
# python -c "from aup_utils import get_aup; print(repr(get_aup(rho, y, y_max)))"
D3LLM_GOLDEN = [
    ([1.0, 2.77], [74.79, 74.68], 74.98, 205.78111501189068),  # GSM8K-CoT, Fast-dLLM-LLaDA
    ([1.0, 9.11], [74.02, 73.09], 74.98, 637.6549264841269),  # GSM8K-CoT, d3LLM-LLaDA
    ([1.0, 5.14], [74.0, 72.63], 74.98, 358.142183536418),  # GSM8K-CoT, dParallel-LLaDA
    ([1.0, 5.74], [32.76, 30.36], 41.15, 107.64192720243037),  # MATH, d3LLM-LLaDA
    ([1.0], [41.15], 41.15, 41.15),  # MATH, Qwen-2.5-7B-it: one point, rho * y
]


@pytest.mark.parametrize("rho,y,y_max,expected", D3LLM_GOLDEN)
def test_aup_matches_d3llm(rho, y, y_max, expected):
    assert aup(np.array(rho), np.array(y), y_max) == pytest.approx(expected, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 8.0), st.floats(50.0, 100.0)), min_size=1, max_size=6, unique_by=lambda p: p[0]))
def test_aup_matches_its_definition(pairs):
    rho, y = [p[0] for p in pairs], [p[1] for p in pairs]
    y_max = max(y) + 1.0
    assert aup(np.array(rho), np.array(y), y_max) == pytest.approx(aup_by_definition(rho, y, y_max), rel=1e-12)


def test_aup_drops_points_below_the_window():
    # the third point is 6 points below the least parallel one: outside the 5-point window, it adds nothing
    assert aup(np.array([1.0, 2.0, 3.0]), np.array([80.0, 79.0, 74.0]), 80.0) == \
        pytest.approx(aup_by_definition([1.0, 2.0], [80.0, 79.0], 80.0))


def runs_frame(rows: list[tuple]) -> pd.DataFrame:
    """runs.csv rows (run_id, rule, delta, n_correct of 100, nfe) of the Fréchet rule on a 24-token answer."""
    frame = pd.DataFrame([{"run_id": r, "policy.name": "blocks", "rule.name": rule, "rule.delta": d,
                           "cache.name": "none", "n_samples": 100, "n_correct": c, "accuracy": c / 100,
                           "tokens_per_s": 1.0, "tokens_per_forward": 16.0 / nfe, "nfe_mean": nfe,
                           "gen_length": 24} for r, rule, d, c, nfe in rows])
    low_high = [wilson_interval(c, 100) for *_, c, _ in rows]
    frame["accuracy_ci_low"], frame["accuracy_ci_high"] = zip(*low_high)
    return frame


def test_summary_fronts_and_fixed_settings():
    runs = runs_frame([("a", "frechet", 0.0, 90, 6.0), ("b", "frechet", 0.2, 95, 7.0), ("c", "frechet", 0.5, 94, 7.5),
                       ("g", "frechet", 0.45, 96, 8.0),  # the grid's run
                       ("p", "frechet", 0.25, 94, 7.2), ("q", "frechet", 0.9, 97, 9.0)])  # outside the studies
    search = Study("frechet-1", "frechet", "search", ["accuracy", "nfe_mean"],
                   [{"number": i, "run_id": r, "params": {"rule.delta": d}, "values": []}
                    for i, (r, d) in enumerate([("a", 0.0), ("b", 0.2), ("c", 0.5)])])
    grid = Study("frechet-grid-1", "frechet", "grid", ["accuracy", "nfe_mean"],
                 [{"number": 0, "run_id": "g", "params": {"rule.delta": 0.45}, "values": []}])
    summary, fronts = summarise_fronts([search, grid], runs)
    row = summary[summary["kind"] == "search"].iloc[0]
    assert (row["runs"], row["front_runs"]) == (3, 2)  # c is beaten by b
    # boxes: a saves 18/24 at 0.90, b saves 17/24 at 0.95 -> 17/24 * 0.95 + (18 - 17)/24 * 0.90
    assert row["hypervolume"] == pytest.approx(17 / 24 * 0.95 + 1 / 24 * 0.90)
    assert list(fronts[fronts["kind"] == "search"]["run_id"]) == ["a", "b"]
    assert fronts["ci_low"].iloc[0] == pytest.approx(100 * wilson_interval(90, 100)[0])
    outside = outside_runs([search, grid], runs).set_index("run_id")
    # δ 0.2 beats the fixed δ 0.25 on the point estimates (95 % at NFE 7.0 vs 94 % at 7.2), but 95 lies inside
    # 94's Wilson interval on 100 documents: a tie, not dominance; δ 0.0 has fewer NFE but is less accurate
    assert outside.loc["p", "dominated_by"] == ""
    assert outside.loc["p", "within_interval_of"].startswith("delta=0.2 (95.0 %")
    assert outside.loc["q", "dominated_by"] == ""  # more accurate than any searched run: on the front
    text = markdown(summary, fronts, "t", outside)
    assert "none (within its interval: delta=0.2 (95.0 %" in text
    # the summary pairs each run's own numbers: most accurate b (95 % at NFE 7), fewest NFE a (NFE 6 at 90 %)
    assert "| 95.0 @ 7.00 | 6.00 @ 90.0 |" in text


def test_a_run_below_a_searched_runs_interval_is_dominated():
    runs = runs_frame([("a", "frechet", 0.1, 99, 6.0), ("p", "frechet", 0.25, 80, 7.2)])
    search = Study("frechet-1", "frechet", "search", ["accuracy", "nfe_mean"],
                   [{"number": 0, "run_id": "a", "params": {"rule.delta": 0.1}, "values": []}])
    outside = outside_runs([search], runs).set_index("run_id")
    assert outside.loc["p", "dominated_by"].startswith("delta=0.1 (99.0 %")  # 99 above 80's interval top
    assert outside.loc["p", "within_interval_of"] == ""
    assert outside.loc["p", "setting"] == "delta=0.25"


def test_aup_of_a_hand_computed_example():
    """Points given out of order: sorted by TPF they are (1.5, 80) then (3.0, 79); y_max 80, so W(80) = 1 and
    W(79) = exp(-3 (1 - 79/80)) = exp(-0.0375) = 0.963194...; AUP = 1.5 * 80 + (3.0 - 1.5) (80 + 79 W(79)) / 2
    = 120 + 0.75 * 156.0924 = 237.0693"""
    got = aup(np.array([3.0, 1.5]), np.array([79.0, 80.0]), 80.0)
    assert got == pytest.approx(237.0693, abs=1e-4)
