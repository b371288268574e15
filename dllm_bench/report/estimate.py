"""Expected GPU hours of a table, from the papers' own throughput: documents x tokens per document / tok/s."""

from __future__ import annotations

import re

from dllm_bench.report.tables import BENCHMARK_SIZES, TableSpec, table_cells

TOK_PER_NFE = re.compile(r"Tok/NFE ([0-9.]+)")


def cell_gpu_hours(cell, limit: int | None = None) -> float | None:
    """Hours one cell takes on the paper's GPU (on at most `limit` documents), or None where the paper prints
    no throughput.

    Tokens per document: Tok/NFE x NFE / documents where the paper prints both (Fast-dLLM++), else the
    generation length (an upper bound: the throughput counts only the answer's tokens).
    """
    row = cell.published
    if row is None or cell.unavailable:
        return None
    speed = row.number("tokens_per_s")
    docs = BENCHMARK_SIZES.get(row["task"])
    gen = cell.overrides.get("gen_length")
    if not speed or docs is None or gen is None:
        return None
    tokens = float(gen)
    match, nfe = TOK_PER_NFE.search(row["note"]), row.number("nfe")
    if match and nfe:
        tokens = min(tokens, float(match.group(1)) * nfe / docs)
    run_docs = docs if limit is None else min(docs, limit)
    return run_docs * tokens / speed / 3600.0


def table_gpu_hours(spec: TableSpec, limit: int | None = None) -> tuple[float, int, int]:
    """(hours summed over the runnable cells, cells counted, cells without an estimate)."""
    hours, counted, unknown = 0.0, 0, 0
    for cell in table_cells(spec):
        if cell.unavailable:
            continue
        h = cell_gpu_hours(cell, limit)
        if h is None:
            unknown += 1
        else:
            hours += h
            counted += 1
    return hours, counted, unknown
