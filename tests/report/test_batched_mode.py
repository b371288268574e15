"""Tables in the batched mode: throughput from the batch-1 timing pass (§), a batched pass's own never compared (¶)."""

from __future__ import annotations

import pytest

from dllm_bench.report.build import resolve_table
from dllm_bench.report.render import entry, long_rows, to_latex, to_markdown
from dllm_bench.report.runs import read_runs
from dllm_bench.report.tables import get_table

from .conftest import summary, write_runs

GSM = "GSM8K (256, 5-shot)"
MODE = {"batch_size": 8, "timing_docs": 100}


def timing(n: int, tokens: int, wall: float, agreement: float) -> dict:
    """The runner's timing_* columns for a batch-1 pass of n documents."""
    return {"timing_batch_size": 1, "timing_n_samples": n, "timing_tokens_total": tokens,
            "timing_tokens_per_s": tokens / wall, "timing_latency_s_mean": wall / n, "timing_wall_time_s_total": wall,
            "timing_agreement": agreement}


def resolved(tmp_path, runs, extra=MODE) -> tuple:
    path = write_runs(tmp_path / "results" / "fast_dllm_t1" / "runs.csv", "fast_dllm_t1", runs)
    spec = get_table("fast_dllm_t1")
    results = resolve_table(spec, read_runs([path]), extra=extra)
    return spec, results, {r.cell.row + r.cell.col: r for r in results}


def lines_of(text: str, row: str) -> list[str]:
    """The accuracy, Tok/s and speedup lines of a row of the Markdown table."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {row} |"))
    return lines[start:start + 3]


def column(line: str, index: int) -> str:
    return line.split(" | ")[index + 2]


def ours(cell: str) -> str:
    """Our part of `published / ours (difference)`."""
    text = cell.split(" / ", 1)[1]
    return text.rsplit(" (", 1)[0] if text.endswith(")") else text


def test_batched_mode_cells_take_the_batch1_pass_and_are_marked(tmp_path):
    # reference (LLaDA): 1319 docs batched 8 (26 tok/s of its own), batch-1 pass: 100 docs, 2000 tokens in 400 s
    # +Cache: two shards of 100 timed docs each: (1500 + 1700) tokens over (100 + 60) s = 20 tok/s
    spec, results, by = resolved(tmp_path, [
        ((GSM, "LLaDA"), MODE, {**summary(1319, 1000, 300000, 33000, 1269.0), **timing(100, 2000, 400.0, 1.0)}),
        ((GSM, "+Cache"), {**MODE, "offset": 0, "limit": 700},
         {**summary(700, 550, 150000, 17000, 300.0), **timing(100, 1500, 100.0, 0.98)}),
        ((GSM, "+Cache"), {**MODE, "offset": 700, "limit": 619},
         {**summary(619, 480, 140000, 16000, 280.0), **timing(100, 1700, 60.0, 0.96)}),
    ])
    ref, cache = by[(GSM, "LLaDA")].aggregate, by[(GSM, "+Cache")].aggregate
    assert (ref.throughput, ref.batch_size, ref.timing_docs, ref.timing_agreement) == ("timed", 8, 100, 1.0)
    assert ref.tokens_per_s == pytest.approx(5.0)  # the batch-1 pass, not the batched 26 tok/s
    assert cache.tokens_per_s == pytest.approx(3200 / 160) and cache.timing_docs == 200
    assert cache.timing_agreement == pytest.approx(0.97)  # weighted by timed documents
    assert cache.accuracy == pytest.approx(100 * 1030 / 1319)  # accuracy from every batched document
    speedup = entry(spec, by[(GSM, "+Cache")], results, "speedup")
    assert speedup.reproduced == pytest.approx(4.0) and speedup.comparable and speedup.delta is not None
    text = to_markdown(spec, results)
    acc, tok, spd = lines_of(text, GSM)
    for line in (acc, tok, spd):
        assert ours(column(line, 0)).endswith("§") and ours(column(line, 1)).endswith("§")
    assert "5.0§ (" in column(tok, 0) and "20.0§ (" in column(tok, 1) and "4.0§ (" in column(spd, 1)
    assert ("§ batched mode: accuracy, NFE and Tok/NFE decoded at batch 8; Tok/s and speedup timed at batch 1 on "
            "the first 100/200 documents of the cell") in text
    assert "96.0–100.0 % of the timed documents" not in text and "97.0–100.0 % of the timed documents" in text
    assert "¶" not in text and r"\S{}" in to_latex(spec, results)
    assert r"% \S{} batched mode: accuracy, NFE and Tok/NFE decoded at batch 8" in to_latex(spec, results)
    rows = {(r["row"], r["column"], r["metric"]): r for r in long_rows(spec, results)}
    tok_row = rows[(GSM, "+Cache", "tokens_per_s")]
    assert (tok_row["throughput"], tok_row["batch_size"], tok_row["timing_docs"]) == ("timed", 8, 200)
    assert float(tok_row["reproduced"]) == pytest.approx(20.0) and float(tok_row["timing_agreement"]) == 0.97


def test_batched_throughput_without_a_batch1_pass_is_never_compared(tmp_path):
    spec, results, by = resolved(tmp_path, [
        ((GSM, "LLaDA"), MODE, {**summary(1319, 1000, 300000, 33000, 1269.0), **timing(100, 2000, 400.0, 1.0)}),
        ((GSM, "+Cache"), {"batch_size": 8}, summary(1319, 1030, 290000, 33000, 330.0)),  # no timing pass
    ])
    cache = by[(GSM, "+Cache")]
    assert cache.aggregate.throughput == "batched" and cache.aggregate.tokens_per_s == pytest.approx(100.0)
    for metric in ("tokens_per_s", "speedup"):
        e = entry(spec, cache, results, metric)
        assert not e.comparable and e.delta is None and e.reproduced is not None
    acc, tok, spd = lines_of(to_markdown(spec, results), GSM)
    assert column(tok, 1).endswith("/ 100.0¶") and column(spd, 1).endswith("/ 20.0¶")  # no (difference)
    assert ours(column(acc, 1)).endswith("§")  # its accuracy was decoded batched: comparable, marked
    text = to_markdown(spec, results)
    assert "¶ Tok/s of a batched pass without a batch-1 timing pass" in text
    assert r"\P{}" in to_latex(spec, results)
    rows = {(r["row"], r["column"], r["metric"]): r for r in long_rows(spec, results)}
    assert rows[(GSM, "+Cache", "tokens_per_s")]["throughput"] == "batched"
    assert rows[(GSM, "+Cache", "tokens_per_s")]["delta"] == ""


def test_reference_without_a_batch1_pass_makes_the_speedup_incomparable(tmp_path):
    spec, results, by = resolved(tmp_path, [
        ((GSM, "LLaDA"), {"batch_size": 8}, summary(1319, 1000, 300000, 33000, 1269.0)),
        ((GSM, "+Cache"), MODE, {**summary(1319, 1030, 290000, 33000, 330.0), **timing(100, 2000, 100.0, 1.0)}),
    ])
    cache = by[(GSM, "+Cache")]
    assert entry(spec, cache, results, "tokens_per_s").comparable
    speedup = entry(spec, cache, results, "speedup")
    assert not speedup.comparable and speedup.delta is None
    _, tok, spd = lines_of(to_markdown(spec, results), GSM)
    assert "20.0§ (" in column(tok, 1) and column(spd, 1).endswith("¶")


def test_batch1_tables_are_unmarked(tmp_path):
    spec, results, _ = resolved(tmp_path, [((GSM, "LLaDA"), {}, summary(1319, 1000, 300000, 33000, 1269.0))],
                                extra=None)
    text = to_markdown(spec, results)
    assert "§" not in text and "¶" not in text
    assert results[0].aggregate.throughput == "batch1"


def test_one_agreement_rate_prints_once(tmp_path):
    spec, results, _ = resolved(tmp_path, [
        ((GSM, "LLaDA"), MODE, {**summary(1319, 1000, 300000, 33000, 1269.0), **timing(100, 2000, 400.0, 1.0)})])
    assert "batch-1 tokens equal the batched ones on 100.0 % of the timed documents." in to_markdown(spec, results)
