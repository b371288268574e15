"""Table builder: golden Markdown on a fixture with known values; missing runs reported, never filled."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
import pytest

from dllm_bench.report.build import resolve_table
from dllm_bench.report.published import load_published
from dllm_bench.report.render import to_latex, to_markdown
from dllm_bench.report.tables import TABLES, get_table, table_cells

GOLDEN = Path(__file__).parent / "golden" / "fast_dllm_pp_t5.md"


def test_every_published_row_is_a_cell_of_exactly_one_table():
    rows = load_published()
    covered = [id(c.published) for spec in TABLES.values() if spec.paper for c in table_cells(spec, rows)
               if c.published is not None]
    assert len(covered) == len(rows) == len(set(covered))


def test_fixture_runs_give_the_known_pooled_numbers(t5_resolved):
    results = t5_resolved
    single = results[("5-shot, No cache", "Threshold")].aggregate
    assert single.n_samples == 300 and single.n_repeats == 1
    assert single.accuracy == pytest.approx(100 * 235 / 300)
    assert single.tokens_per_s == pytest.approx(28.0)
    seeds = results[("5-shot, PrefixCache", "Fréchet")].aggregate
    assert seeds.n_repeats == 2 and seeds.n_samples == 300
    assert seeds.accuracy == pytest.approx(100 * 470 / 600)
    assert seeds.tokens_per_s == pytest.approx(32.0)
    assert seeds.tokens_per_s_sd == pytest.approx(math.sqrt(8.0))
    shards = results[("8-shot, DualCache", "Factor")].aggregate
    assert shards.n_repeats == 1 and shards.n_samples == 300
    assert shards.accuracy == pytest.approx(100 * 230 / 300)
    assert shards.tokens_per_s == pytest.approx(30500 / 820)
    assert shards.nfe_total == pytest.approx(8100)


def test_a_run_with_other_settings_never_fills_a_cell(t5_resolved):
    results = t5_resolved
    cell = results[("5-shot, No cache", "Fréchet")]  # only a delta=0.3 run exists
    assert cell.status == "missing" and cell.aggregate is None
    assert "rule=frechet rule.delta=0.25" in cell.command
    assert sum(r.status == "ok" for r in results.values()) == 3


def test_markdown_matches_golden_file(t5_results, tmp_path, load_script):
    out = tmp_path / "tables"
    assert load_script("reproduce_table").main(["--table", "fast_dllm_pp_t5", "--results-dir", str(t5_results), "--out", str(out),
                           "--no-run"]) == 0
    text = (out / "fast_dllm_pp_t5.md").read_text(encoding="utf-8")
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")
    assert (out / "fast_dllm_pp_t5.tex").read_text().startswith("% Fast-dLLM++ Table 5")
    long = pd.read_csv(out / "fast_dllm_pp_t5.csv")
    acc = long[(long.row == "5-shot, No cache") & (long.column == "Threshold") & (long.metric == "accuracy")].iloc[0]
    assert acc.published == pytest.approx(78.33) and acc.reproduced == pytest.approx(78.333333, abs=1e-5)
    assert acc.ci_low < acc.reproduced < acc.ci_high


@pytest.mark.parametrize("name", ["slowfast_t3", "slowfast_t4"])
def test_with_no_runs_every_published_number_shows_and_every_cell_is_missing(name):
    spec = get_table(name)
    results = resolve_table(spec, pd.DataFrame())
    assert results and all(r.status in ("missing", "unavailable") and r.aggregate is None for r in results)
    text = to_markdown(spec, results)
    for r in results:
        if r.cell.published is not None:  # the code-preset companions have no published number of their own
            assert f"{r.cell.published['accuracy']} / " in text
        if r.command:
            assert f"`{r.command}`" in text
    assert f"Cells with runs: 0 of {len(results)}." in text
    assert "\\begin{tabular}" in to_latex(spec, results)


def test_unknown_table_names_the_choices():
    with pytest.raises(ValueError, match="table='t9' is unknown; choose one of fast_dllm_pp_t1"):
        get_table("t9")
