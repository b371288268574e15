"""The third column: independent reproductions (results/published/independent_reproductions.csv) keyed to the
published rows they reproduce and shown in every table they cover; d3LLM's AUP leaderboard recomputed as its
main.py computes it (an independent loop here)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from dllm_bench.report.build import resolve_table
from dllm_bench.report.leaderboard import (
    LEADERBOARD_MD,
    leaderboard_aup,
    leaderboard_markdown,
    load_leaderboard,
)
from dllm_bench.report.published import (
    KEY_COLUMNS,
    load_published,
    load_reproductions,
    reproduction_of,
)
from dllm_bench.report.render import long_rows, to_latex, to_markdown
from dllm_bench.report.tables import TABLES, get_table, published_path, table_cells

PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "published"


def _published_rows() -> dict[tuple, list]:
    rows: dict[tuple, list] = {}
    for path in sorted(PUBLISHED.glob("*published*.csv")):
        for row in load_published(path):
            rows.setdefault(tuple(row.text[c] for c in KEY_COLUMNS), []).append(row)
    return rows


def test_each_reproduction_names_one_published_row_and_its_official_numbers_are_the_papers():
    published = _published_rows()
    papers = {key[0] for key in published}
    matched = 0
    for rep in load_reproductions():
        assert rep["repo"] and rep["path"] and len(rep["commit"]) == 40, rep.text
        if rep["paper"] not in papers:  # a paper no table of ours prints (the LLaDA README's tables): data only
            assert rep["official_accuracy"], rep.text
            continue
        (row,) = published[rep.key()]
        matched += 1
        for ours, theirs in (("accuracy", "official_accuracy"), ("tokens_per_s", "official_tokens_per_s")):
            if rep[theirs]:  # the reproducer prints the paper's number beside its own: it must be ours
                assert float(rep[theirs]) == float(row[ours]), (rep.key(), ours)
    assert matched == 66  # Fast-dLLM Tables 1 and 2 (dllm), dParallel-LLaDA in the field table (d3LLM)


def test_every_covered_cell_of_every_table_carries_its_reproduction():
    counts = {}
    reproductions = load_reproductions()
    for name, spec in TABLES.items():
        if spec.paper:
            cells = table_cells(spec, load_published(published_path(spec)))
            counts[name] = sum(reproduction_of(c.published, reproductions) is not None for c in cells)
    assert {k: v for k, v in counts.items() if v} == {"fast_dllm_t1": 32, "fast_dllm_t2": 32, "field": 2}


@pytest.fixture(scope="module")
def table_t1():
    spec = get_table("fast_dllm_t1")
    return spec, resolve_table(spec, pd.DataFrame())


def test_a_covered_table_shows_published_independent_and_ours(table_t1):
    spec, results = table_t1
    text = to_markdown(spec, results)
    assert "Each cell: published / independent reproduction / ours" in text
    assert "dllm: ZHZisZZ/dllm examples/fastdllm/README.md @ bcb6bed (32 cells)" in text
    assert "| 78.5 / 78.0 / missing [4] |" in text  # GSM8K-256 Fast-dLLM: paper 78.5 @ 54.4, dllm 78.0 @ 52.8
    assert "| 54.4 / 52.8 / missing [4] |" in text
    assert "43.3 / 36.0 / missing" in text and "114.1 / 68.1 / missing" in text  # HumanEval-256
    assert "independent reproduction" in to_latex(spec, results)
    rows = {(r["row"], r["column"], r["metric"]): r for r in long_rows(spec, results)}
    cell = rows[("GSM8K (256, 5-shot)", "Fast-dLLM", "accuracy")]
    assert cell["published"] == "78.5" and cell["independent"] == "78.0" and "ZHZisZZ/dllm" in cell["independent_source"]


def test_an_uncovered_table_keeps_two_numbers():
    spec = get_table("slowfast_t1")
    text = to_markdown(spec, resolve_table(spec, pd.DataFrame()))
    assert "Each cell: published / reproduced" in text and "independent" not in text


def _reference_aup(pairs: list[tuple[float, float]], y_max: float, alpha: float = 3.0, offset: float = 5.0) -> float:
    """The leaderboard's AUP written out step by step (aup_utils.get_aup's definition)."""
    pairs = sorted(pairs, key=lambda p: p[0])
    y_min = pairs[0][1] - offset
    kept = [p for p in pairs if p[1] >= y_min]
    weight = lambda y: min(math.exp(-alpha * (1 - y / y_max)), 1.0)  # noqa: E731
    total = kept[0][0] * kept[0][1]
    for (r0, y0), (r1, y1) in zip(kept, kept[1:]):
        total += 0.5 * (r1 - r0) * (y1 * weight(y1) + y0 * weight(y0))
    return total


def test_leaderboard_aup_is_the_leaderboards():
    points = load_leaderboard()
    table = leaderboard_aup(points)
    assert len(table) == points.groupby(["dataset", "task", "method"]).ngroups
    for row in table.itertuples():
        task = points[(points["dataset"] == row.dataset) & (points["task"] == row.task)]
        own = task[task["method"] == row.method]
        pairs = list(zip(own["tokens_per_forward"], own["accuracy"]))
        ordered = sorted(pairs)
        assert ordered[0][1] - ordered[-1][1] <= 5.0  # the leaderboard's own check holds: no point is dropped
        assert row.y_max == task["accuracy"].max()  # y_max over every method of that task in that file
        assert row.aup == pytest.approx(_reference_aup(pairs, row.y_max), rel=1e-12)
    d3 = table[(table["dataset"] == "data_llada") & (table["task"] == "MATH") & (table["method"] == "d3LLM-LLaDA")]
    assert d3["aup"].iloc[0] == pytest.approx(107.64, abs=0.01)  # 32.76 + 4.74 (30.36 W + 32.76 W) / 2, y_max 41.15


def test_leaderboard_markdown_is_current():
    points = load_leaderboard()
    assert LEADERBOARD_MD.read_text(encoding="utf-8") == leaderboard_markdown(leaderboard_aup(points), points), \
        "rerun: python scripts/reproduce_table.py --aup"
