"""Write a resolved table in the paper's layout: Markdown, LaTeX and a long CSV with every number behind it."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dllm_bench.report.aggregate import Aggregate
from dllm_bench.report.build import CellResult, reference_result, reproduced_value
from dllm_bench.report.published import (
    REPRODUCED_METRICS,
    Reproduction,
    decimals,
    known_reproductions,
    reproduction_of,
)
from dllm_bench.report.tables import METRIC_LABELS, TableSpec

TIMED_METRICS = ("tokens_per_s", "speedup", "latency_s")
DEFAULT_DECIMALS = {"accuracy": 1, "tokens_per_s": 1, "nfe": 0, "speedup": 2, "tokens_per_forward": 2, "nfe_mean": 1,
                    "latency_s": 3, "forward_positions_mean": 1}
LONG_COLUMNS = (
    "table", "row", "column", "metric", "published", "independent", "independent_source", "reproduced", "delta", "ci_low", "ci_high", "spread_sd",
    "n_samples", "n_full", "n_repeats", "loaded", "batch_size", "throughput", "timing_docs", "timing_agreement",
    "status", "run_ids", "reason", "command",
)
BATCHED_MARK, NOT_COMPARABLE_MARK, BOUND_MARK = "§", "¶", "◇"
BOUND_NOTE = ("◇ = the oracle, a bound rather than a method: each step commits every position whose argmax already "
              "equals this model's sequential decode, which it runs first and does not time; its NFE is a floor "
              "for reproducing that decode and its Tok/s leaves the reference decode out, so it is not a "
              "throughput any deployment could reach.")


@dataclass(frozen=True)
class Entry:
    """One metric of one cell: the printed published text, our value and the pieces of its cell text."""

    metric: str
    published_text: str
    published: float | None
    reproduced: float | None
    ndigits: int
    comparable: bool = True  # False: a batched pass's own throughput, never set against the published one
    loaded: bool = False  # a throughput timed on a loaded machine: the load's speed, not printed or compared
    independent_text: str = ""  # an independent reproduction's printed number ("" = none)

    @property
    def delta(self) -> float | None:
        if self.published is None or self.reproduced is None or not self.comparable or self.loaded:
            return None
        return self.reproduced - self.published


def _fmt(value: float, ndigits: int) -> str:
    return f"{value:.{ndigits}f}"


def _signed(value: float, ndigits: int) -> str:
    text = f"{value:+.{ndigits}f}"
    return "+" + text[1:] if float(text) == 0 else text


def entry(spec: TableSpec, result: CellResult, results: list[CellResult], metric: str) -> Entry:
    """Collect the published and reproduced numbers of one metric of a cell."""
    row = result.cell.published
    published_text = row[metric].strip() if row is not None and metric in row.text else ""
    published = float(published_text) if published_text else None
    ndigits = decimals(published_text) if published_text else DEFAULT_DECIMALS[metric]
    found = independent(result)
    independent_text = found[metric].strip() if found is not None and metric in REPRODUCED_METRICS else ""
    return Entry(metric, published_text, published, reproduced_value(spec, result, results, metric), ndigits,
                 comparable(spec, result, results, metric), timed_loaded(spec, result, results, metric),
                 independent_text)


def independent(result: CellResult) -> Reproduction | None:
    """The independent reproduction of the cell's published row (results/published/independent_reproductions.csv)."""
    if result.cell.published is None:  # a table of our own (tiny): nothing to reproduce, no file read
        return None
    return reproduction_of(result.cell.published, list(known_reproductions()))


def covered(results: list[CellResult]) -> list[Reproduction]:
    """The independent reproductions of a table's cells (a table with any shows them in every cell)."""
    return [found for found in map(independent, results) if found is not None]


def timed_loaded(spec: TableSpec, result: CellResult, results: list[CellResult], metric: str) -> bool:
    """Whether a timed metric rests on a run timed on a loaded machine (a speedup: either of its two cells)."""
    if metric not in TIMED_METRICS:
        return False
    involved = [result, reference_result(spec, result, results) if metric == "speedup" else None]
    return any(r is not None and r.aggregate is not None and bool(r.aggregate.loaded) for r in involved)


def comparable(spec: TableSpec, result: CellResult, results: list[CellResult], metric: str) -> bool:
    """False for a paper table's throughput (or speedup) that rests on a batched pass without a batch-1 timing
    pass: the papers time at batch 1, so such a figure is not theirs to compare with."""
    if spec.paper is None or metric not in TIMED_METRICS:
        return True
    involved = [result, reference_result(spec, result, results) if metric == "speedup" else None]
    return not any(r is not None and r.aggregate is not None and r.aggregate.throughput == "batched" for r in involved)


def mode_mark(spec: TableSpec, result: CellResult, e: Entry) -> str:
    """§ on every line of a batched-mode cell (decoded at batch B, throughput timed at batch 1 on a subsample),
    and on the accuracy lines of a paper table's batched cell; ¶ on a throughput that is not comparable."""
    agg = result.aggregate
    if not e.comparable:
        return NOT_COMPARABLE_MARK
    if agg is not None and (agg.throughput == "timed" or (spec.paper is not None and agg.throughput == "batched")):
        return BATCHED_MARK
    return ""


def _ours_text(spec: TableSpec, result: CellResult, e: Entry) -> str:
    agg = result.aggregate
    if e.loaded:  # the number stays in the CSV; the table compares methods, not machine loads
        return "—‡" + ("†" if result.partial else "") + mode_mark(spec, result, e)
    text = _fmt(e.reproduced, e.ndigits)
    if e.metric == "accuracy" and agg is not None and not math.isnan(agg.accuracy_ci_low):
        text += f" [{_fmt(agg.accuracy_ci_low, e.ndigits)}, {_fmt(agg.accuracy_ci_high, e.ndigits)}]"
    if e.metric == "accuracy" and result.other is not None:
        mode, other = result.other
        if _fmt(other.accuracy, e.ndigits) != _fmt(e.reproduced, e.ndigits):
            text += f" ({mode} {_fmt(other.accuracy, e.ndigits)})"
    if e.metric == "tokens_per_s" and agg is not None and not math.isnan(agg.tokens_per_s_sd):
        text += f" ±{_fmt(agg.tokens_per_s_sd, e.ndigits)}"
    if e.metric != "accuracy" and is_bound(result):
        text += BOUND_MARK
    if result.partial:
        text += f" n={agg.n_samples}†" if e.metric == "accuracy" else "†"
    return text + mode_mark(spec, result, e)


def verdict_mark(result: CellResult, e: Entry, note: int | None) -> str:
    """` [n]` on the accuracy line of a code-task cell: note n counts its sandbox verdicts."""
    agg = result.aggregate
    return f" [{note}]" if note is not None and e.metric == "accuracy" and agg is not None and agg.sandbox else ""


def is_bound(result: CellResult) -> bool:
    """Whether a cell runs the oracle rule (its speed figures are a bound, not a throughput point)."""
    return bool(result.config) and (result.config.get("rule") or {}).get("name") == "oracle"


def _setting(values: set) -> str:
    return "/".join(str(v) for v in sorted(values, key=str))


def settings_short(results: list[CellResult]) -> str:
    """`gen 24, block 8, early stop on, count cut`: the settings line for a plot title."""
    configs = [r.config for r in results if r.config]
    if not configs:
        return ""
    stop = _setting({"on" if c.get("early_stop") else "off" for c in configs})
    return (f"gen {_setting({c.get('gen_length') for c in configs})}, block "
            f"{_setting({c.get('block_length') for c in configs})}, early stop {stop}, count "
            f"{_setting({c.get('count_rule', 'cut') for c in configs})}")


def settings_line(results: list[CellResult]) -> str:
    """The decoding settings behind every number of the table: answer length, blocks, early stop and the token
    count behind Tok/s and Tok/NFE (several values where cells differ); '' when no cell has a config."""
    configs = [r.config for r in results if r.config]
    if not configs:
        return ""
    gen = _setting({c.get("gen_length") for c in configs})
    block = _setting({c.get("block_length") for c in configs})
    stops = {bool(c.get("early_stop")) for c in configs}
    stop = {frozenset({True}): "on", frozenset({False}): "off"}.get(frozenset(stops), "on in some cells")
    rules = {c.get("count_rule", "cut") for c in configs}
    line = (f"Decoding: answer region {gen} tokens in blocks of {block}; early stop {stop}; Tok/s and Tok/NFE count "
            f"`{_setting(rules)}` tokens (docs/counting.md).")
    if True in stops and "cut" in rules:
        line += (" With early stop and `cut`, the EOS and padding a row commits before it stops cost forwards but "
                 "are not counted, so one-token-per-step decoding shows under 1 token per forward.")
    return line


def cell_text(spec: TableSpec, result: CellResult, e: Entry, note: int | None, third: bool = False) -> str:
    """`published / reproduced (delta)`, with ``third`` `published / independent / reproduced (delta)`; a cell
    without a run says `missing [n]` or `n/a [n]`."""
    mark = f" [{note}]" if note is not None else ""
    if e.reproduced is not None:
        ours = _ours_text(spec, result, e) + verdict_mark(result, e, note)
    elif result.status == "ok":  # the run exists but this metric needs another cell (speedup reference)
        ours = "missing"
    else:
        ours = ("missing" if result.status == "missing" else "n/a") + mark
    if spec.paper is None:
        return ours
    published = e.published_text or "—"
    delta = f" ({_signed(e.delta, e.ndigits)})" if e.delta is not None else ""
    if third:
        return f"{published} / {e.independent_text or '—'} / {ours}{delta}"
    return f"{published} / {ours}{delta}"


def _grid(results: list[CellResult]) -> tuple[list[tuple], list[tuple], dict]:
    rows, cols, by_key = [], [], {}
    for r in results:
        if r.cell.row not in rows:
            rows.append(r.cell.row)
        if r.cell.col not in cols:
            cols.append(r.cell.col)
        by_key[(r.cell.row, r.cell.col)] = r
    return rows, cols, by_key


def _notes(results: list[CellResult]) -> dict[int, int]:
    """Footnote number per cell needing one (missing run, unavailable, or a speedup whose reference is missing),
    then per code-task cell, whose note counts its samples' sandbox verdicts."""
    numbers: dict[int, int] = {}
    for r in results:
        if r.status != "ok" and id(r) not in numbers:
            numbers[id(r)] = len(numbers) + 1
    for r in results:
        if r.status == "ok" and r.aggregate is not None and r.aggregate.sandbox and id(r) not in numbers:
            numbers[id(r)] = len(numbers) + 1
    return numbers


def sandbox_note(agg: Aggregate) -> str:
    """`sandbox verdicts: 150 passed, 10 failed, 3 timeout, 1 killed` over the cell's pooled samples."""
    counts = ", ".join(f"{n} {status}" for status, n in agg.sandbox)
    repeats = f" over {agg.n_repeats} repeats" if agg.n_repeats > 1 else ""
    return f"sandbox verdicts{repeats}: {counts} (samples.jsonl `sandbox_status`, docs/sandbox.md)"


def _note_lines(results: list[CellResult], numbers: dict[int, int]) -> list[str]:
    lines = []
    for r in sorted((r for r in results if id(r) in numbers), key=lambda r: numbers[id(r)]):
        if r.status == "ok":
            lines.append(f"{numbers[id(r)]}. {cell_label(r)}: {sandbox_note(r.aggregate)}")
            continue
        text = f"{numbers[id(r)]}. {r.reason}"
        if r.command:
            text += f": `{r.command}`"
        lines.append(text)
    return lines


def cell_label(r: CellResult) -> str:
    """`row / column` of a cell, for a note that is not about a missing run."""
    return " / ".join(" ".join(k for k in key if k) for key in (r.cell.row, r.cell.col))


LOADED_SHORT = "—‡ = timed on a loaded machine, speed left out (note below)"
OFFLINE_NOTE = ("Offline machines: add `task.data_dir=<folder with the benchmark's files>` (e.g. "
                "`../shared/data/gsm8k`) to the commands, and a local `model.name_or_path`.")
LOADED_NOTE = ("—‡ = timed on a loaded machine (load average above the CPU count): its Tok/s, latency or speedup "
               "measure the load, not the method, so the table leaves them out (the .csv keeps them, `loaded` True)")


def _values(values: list) -> str:
    return "/".join(str(v) for v in sorted(set(values)))


def mode_notes(spec: TableSpec, results: list[CellResult]) -> list[str]:
    """What § and ¶ mean in this table, with the batch sizes, timing subsamples and token agreement behind them."""
    aggs = [r.aggregate for r in results if r.aggregate is not None]
    timed = [a for a in aggs if a.throughput == "timed"]
    batched = [a for a in aggs if a.throughput == "batched"] if spec.paper is not None else []
    lines = []
    if timed:
        rates = [a.timing_agreement for a in timed if a.timing_agreement is not None]
        low, high = (f"{100 * min(rates):.1f}", f"{100 * max(rates):.1f}") if rates else ("", "")
        share = low if low == high else f"{low}–{high}"
        agree = f"; batch-1 tokens equal the batched ones on {share} % of the timed documents" if rates else ""
        lines += ["", f"{BATCHED_MARK} batched mode: accuracy, NFE and Tok/NFE decoded at batch "
                      f"{_values([a.batch_size for a in timed if a.batch_size])}; Tok/s and speedup timed at batch 1 "
                      f"on the first {_values([a.timing_docs for a in timed])} documents of the cell (runs.csv "
                      f"`timing_*`, docs/reports.md \"Batched mode\"){agree}."]
    if batched:
        if not timed:
            lines += ["", f"{BATCHED_MARK} decoded at batch {_values([a.batch_size for a in batched if a.batch_size])} "
                          "(a prompt decodes the same alone or batched)."]
        lines += ["", f"{NOT_COMPARABLE_MARK} Tok/s of a batched pass without a batch-1 timing pass: the papers time "
                      "at batch 1, so no difference to the published figure is printed; rerun with `timing_docs` "
                      "(`scripts/reproduce_table.py --batched B --timing-docs N`)."]
    return lines


def _legend(spec: TableSpec, third: bool = False) -> str:
    if third:
        return ("Each cell: published / independent reproduction / ours (ours − published). The middle number is "
                "another group's run of the published setting (sources below; — = none for that cell). Ours: "
                "accuracy with its 95 % Wilson interval; n=… † = run on fewer documents than the paper; "
                + LOADED_SHORT + "; `missing [n]`: no run yet, note n gives the command that fills it; `n/a [n]`: "
                "this harness cannot run it (note n says why); — = not printed.")
    if spec.paper is None:
        return ("Each cell: our value (accuracy with its 95 % Wilson interval; ± = spread over repeats). "
                "n=… † = run on fewer documents than the task has; " + LOADED_SHORT + "; "
                "`missing [n]`: no run yet, note n gives the command.")
    return ("Each cell: published / reproduced (reproduced − published). Reproduced accuracy carries its 95 % "
            "Wilson interval; n=… † = run on fewer documents than the paper; " + LOADED_SHORT + "; `missing [n]`: "
            "no run yet, note n gives the command that fills it; `n/a [n]`: this harness cannot run it (note n "
            "says why); — = not printed.")


def _sources_lines(results: list[CellResult]) -> list[str]:
    """Where a table's independent reproductions are printed: one line per source, with its cell count."""
    found = covered(results)
    if not found:
        return []
    counts: dict[str, int] = {}
    for r in found:
        counts[r.source()] = counts.get(r.source(), 0) + 1
    return [f"Independent reproductions: {'; '.join(f'{s} ({n} cells)' for s, n in counts.items())} "
            "(results/published/independent_reproductions.csv).", ""]


def _grid_lines(spec: TableSpec, results: list[CellResult], rows: list, cols: list, by_key: dict,
                numbers: dict) -> list[tuple[Any, list[str]]]:
    """(row, [row label, metric label, cell texts...]) per table line: one line per row and metric."""
    out, third = [], bool(covered(results))
    for row in rows:
        for i, metric in enumerate(spec.metrics):
            texts = []
            for col in cols:
                r = by_key.get((row, col))
                texts.append("" if r is None else cell_text(spec, r, entry(spec, r, results, metric), numbers.get(id(r)),
                                                            third))
            out.append((row, [spec.label_row(row) if i == 0 else "", METRIC_LABELS[metric], *texts]))
    return out


def _methods_lines(spec: TableSpec, results: list[CellResult], rows: list, cols: list, by_key: dict,
                   numbers: dict) -> list[tuple[Any, list[str]]]:
    """(row, [row label, column label, a text per metric]) per table line: one line per row and cell column."""
    out, third = [], bool(covered(results))
    for row in rows:
        present = [col for col in cols if (row, col) in by_key]
        for j, col in enumerate(present):
            r = by_key[(row, col)]
            texts = [cell_text(spec, r, entry(spec, r, results, m), numbers.get(id(r)), third) for m in spec.metrics]
            out.append((row, [spec.label_row(row) if j == 0 else "", spec.label_col(col), *texts]))
    return out


def table_lines(spec: TableSpec, results: list[CellResult]) -> tuple[list[str], list[tuple[Any, list[str]]]]:
    """(header, lines) in the spec's layout: `grid` (a line per row and metric) or `methods` (a line per row and
    cell column, a column per metric)."""
    rows, cols, by_key = _grid(results)
    numbers = _notes(results)
    if spec.layout == "methods":
        header = [spec.row_header, spec.col_header, *[METRIC_LABELS[m] for m in spec.metrics]]
        return header, _methods_lines(spec, results, rows, cols, by_key, numbers)
    header = [spec.row_header, "Metric", *[spec.label_col(c) for c in cols]]
    return header, _grid_lines(spec, results, rows, cols, by_key, numbers)


def scoring_line(results: list[CellResult]) -> list[str]:
    """The table's scoring mode(s) and the math-verify version(s) that scored its runs (as lines, or none)."""
    modes = sorted({r.config["task"].get("scoring", "lm_eval") for r in results if r.config and "task" in r.config})
    if not modes:
        return []
    versions = sorted({v for r in results if r.aggregate is not None for v in r.aggregate.math_verify})
    scored_runs = any(r.aggregate is not None for r in results)
    verify = (f"; math-verify {'/'.join(versions)}" if versions else
              "; math-verify version not recorded by these runs" if scored_runs else "")
    return [f"Scored with `task.scoring={'/'.join(modes)}`{verify} (docs/tasks.md, \"Scoring modes\").", ""]


def _precision_lines(spec: TableSpec, results: list[CellResult]) -> list[str]:
    """Which dtype a paper table's cells take the confidence softmax in (``confidence_precision``)."""
    precisions = sorted({str(r.config.get("confidence_precision", "float64")) for r in results if r.config})
    if spec.paper is None or not precisions:
        return []
    return [f"Confidence softmax in `confidence_precision={'/'.join(precisions)}`, as the cell's published loop "
            "takes it (float64: the LLaDA loops of Fast-dLLM and Fast-dLLM++; model = the logits' dtype: Dream's "
            "loops and SlowFast's; the cell listing in docs/reports.md gives it per cell).", ""]


def to_markdown(spec: TableSpec, results: list[CellResult]) -> str:
    """The table in the paper's layout (rows x columns, one line per metric) with notes and assumptions."""
    numbers = _notes(results)
    header, body = table_lines(spec, results)
    scored = scoring_line(results)
    settings = [settings_line(results), ""] if settings_line(results) else []
    lines = [f"## {spec.title}", "", *settings, _legend(spec, bool(covered(results))), "",
             *_sources_lines(results), *scored, *_precision_lines(spec, results),
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, fields in body:
        lines.append("| " + " | ".join(fields) + " |")
    notes = _note_lines(results, numbers)
    if notes:
        lines += ["", "Notes:", "", *notes]
    if any(r.partial for r in results):
        whose = "the paper's benchmark run" if spec.paper else "the task has"
        lines += ["", f"† fewer documents than {whose} (n = documents in the cell; n_samples in the CSV)."]
    if any("(lm_eval " in t or "(paper " in t for _, fields in body for t in fields[2:]):
        lines += ["", "`(lm_eval x)` / `(paper x)`: the same generations scored under the other `task.scoring` "
                      "mode, shown where it differs (docs/tasks.md, \"Scoring modes\")."]
    if any(r.aggregate is not None and r.aggregate.loaded for r in results):
        lines += ["", LOADED_NOTE + "; rerun those cells on an idle machine to compare their speed."]
    if any(is_bound(r) for r in results):
        lines += ["", BOUND_NOTE]
    lines += mode_notes(spec, results)
    if spec.needs_gpu and any(r.status == "missing" for r in results):
        lines += ["", OFFLINE_NOTE]
    assumptions = sorted({a for r in results for a in r.cell.assumptions})
    if assumptions:
        lines += ["", "Settings not stated in the paper (taken from the published code or defaults):", "",
                  *[f"- {a}" for a in assumptions]]
    n_ok = sum(r.status == "ok" for r in results)
    lines += ["", f"Cells with runs: {n_ok} of {len(results)}.", ""]
    return "\n".join(lines)


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    """Escape LaTeX specials so any label or note prints literally."""
    out = "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)
    return (out.replace("—", "--").replace("±", r"$\pm$").replace("†", r"$^\dagger$").replace("‡", r"$^\ddagger$")
            .replace(BATCHED_MARK, r"\S{}").replace(NOT_COMPARABLE_MARK, r"\P{}").replace(BOUND_MARK, r"$\diamond$")
            .replace("−", "-").replace("…", r"\ldots{}"))


def to_latex(spec: TableSpec, results: list[CellResult]) -> str:
    """The same grid as a booktabs tabular; missing cells keep their note numbers."""
    numbers = _notes(results)
    header, body = table_lines(spec, results)
    settings = ["% " + latex_escape(settings_line(results))] if settings_line(results) else []
    sources = ["% " + latex_escape(line) for line in _sources_lines(results) if line]
    lines = [f"% {spec.title}", *settings, "% " + _legend(spec, bool(covered(results))), *sources,
             r"\begin{tabular}{" + "l" * len(header) + "}",
             r"\toprule", " & ".join(latex_escape(x) for x in header) + r" \\", r"\midrule"]
    for i, (row, fields) in enumerate(body):
        lines.append(" & ".join(latex_escape(x) for x in fields) + r" \\")
        if i + 1 == len(body):
            lines.append(r"\bottomrule")
        elif body[i + 1][0] != row:
            lines.append(r"\midrule")
    lines.append(r"\end{tabular}")
    bound = [BOUND_NOTE] if any(is_bound(r) for r in results) else []
    lines += ["% " + latex_escape(n) for n in [*_note_lines(results, numbers), *mode_notes(spec, results),
                                                *_precision_lines(spec, results), *bound] if n]
    return "\n".join(lines) + "\n"


def long_rows(spec: TableSpec, results: list[CellResult]) -> list[dict[str, object]]:
    """One row per (cell, metric) with every number behind the printed text."""
    out = []
    for r in results:
        agg = r.aggregate
        for metric in spec.metrics:
            e = entry(spec, r, results, metric)
            found = independent(r)
            ci = metric == "accuracy" and agg is not None
            sd = (agg.accuracy_sd if metric == "accuracy" else agg.tokens_per_s_sd if metric == "tokens_per_s"
                  else math.nan) if agg is not None else math.nan
            out.append({
                "table": spec.name, "row": spec.label_row(r.cell.row), "column": spec.label_col(r.cell.col),
                "metric": metric, "published": e.published_text, "independent": e.independent_text,
                "independent_source": found.source() if found is not None and e.independent_text else "",
                "reproduced": "" if e.reproduced is None else repr(e.reproduced),
                "delta": "" if e.delta is None else repr(e.delta),
                "ci_low": repr(agg.accuracy_ci_low) if ci else "", "ci_high": repr(agg.accuracy_ci_high) if ci else "",
                "spread_sd": "" if math.isnan(sd) else repr(sd),
                "n_samples": agg.n_samples if agg else "", "n_full": r.full_size or "",
                "n_repeats": agg.n_repeats if agg else "",
                "loaded": "" if agg is None or agg.loaded is None else agg.loaded,
                "batch_size": "" if agg is None or agg.batch_size is None else agg.batch_size,
                "throughput": agg.throughput if agg else "",
                "timing_docs": "" if agg is None or agg.timing_docs is None else agg.timing_docs,
                "timing_agreement": "" if agg is None or agg.timing_agreement is None else repr(agg.timing_agreement),
                "status": r.status, "run_ids": " ".join(agg.run_ids) if agg else "",
                "reason": r.reason or "", "command": r.command or "",
            })
    return out


def write_table(spec: TableSpec, results: list[CellResult], out_dir: Path | str) -> dict[str, Path]:
    """Write `<name>.md`, `<name>.tex` and `<name>.csv` under out_dir; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"md": out_dir / f"{spec.name}.md", "tex": out_dir / f"{spec.name}.tex", "csv": out_dir / f"{spec.name}.csv"}
    paths["md"].write_text(to_markdown(spec, results), encoding="utf-8")
    paths["tex"].write_text(to_latex(spec, results), encoding="utf-8")
    with paths["csv"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=LONG_COLUMNS)
        writer.writeheader()
        writer.writerows(long_rows(spec, results))
    return paths
