"""Pool runs.csv rows of one setting across shards and seeds: accuracy with a binomial CI, speed mean and spread."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from dllm_bench.runner.summary import SANDBOX_COLUMNS, wilson_interval


@dataclass(frozen=True)
class Aggregate:
    """One setting's pooled result; accuracy and CI in percent, NFE total per repeat, speeds per repeat."""

    n_samples: int           # documents per repeat (shards summed)
    n_repeats: int           # distinct seeds / executions pooled
    accuracy: float
    accuracy_ci_low: float
    accuracy_ci_high: float
    accuracy_sd: float       # spread of accuracy across repeats (nan with one repeat)
    tokens_per_s: float      # mean over repeats
    tokens_per_s_sd: float   # standard deviation over repeats (nan with one repeat)
    nfe_total: float         # mean over repeats of the NFE summed over documents
    nfe_mean: float          # NFE per document
    tokens_per_forward: float
    run_ids: tuple[str, ...]
    forward_positions_mean: float = math.nan  # query positions computed per document (nan: runs without the column)
    latency_s: float = math.nan    # seconds a document waits for its answer (runs.csv `latency_s_mean`), pooled
    task_docs: int | None = None   # documents the task has (runs.csv `task_docs`; None for older runs)
    loaded: bool | None = None     # any pooled run timed on a loaded machine (None: not recorded)
    batch_size: int | None = None  # the pooled runs' batch size (None: not recorded)
    throughput: str = "batch1"     # where tokens/s comes from: THROUGHPUT_SOURCES
    timing_docs: int | None = None          # documents per repeat of the batch-1 timing pass ("timed")
    timing_agreement: float | None = None   # share of them whose batch-1 tokens equal the batched ones
    sandbox: tuple[tuple[str, int], ...] = ()  # code tasks: (verdict, samples) over every pooled run, non-zero only
    math_verify: tuple[str, ...] = ()       # math-verify versions that scored the pooled runs (runs.csv `math_verify`)


# "batch1": the runs' own timing at batch 1 (or batch size not recorded); "timed": the batched mode, tokens/s from
# the runs' batch-1 timing pass (runs.csv `timing_*`); "batched": a batched pass's own tokens/s, no batch-1 pass.
THROUGHPUT_SOURCES = ("batch1", "timed", "batched")
TIMING_COLUMNS = ("timing_n_samples", "timing_tokens_total", "timing_wall_time_s_total")


REQUIRED_COLUMNS = ("run_id", "n_samples", "n_correct", "nfe_total", "tokens_total", "wall_time_s_total")


def _repeat_key(frame: pd.DataFrame) -> pd.Series:
    """Rows of one repeat: same seed and same results folder (shards of a run differ only in offset)."""
    seed = frame["seed"].astype(str) if "seed" in frame else pd.Series("0", index=frame.index)
    name = frame["name"].astype(str) if "name" in frame else pd.Series("", index=frame.index)
    return seed + "|" + name


def without_overlaps(rows: pd.DataFrame) -> pd.DataFrame:
    """Within a repeat, runs whose documents overlap count once: a run id covers code, data and selection
    (docs/runner.md, "Run identity"), so the same setting rerun after a commit, or with a longer `limit`, is a
    second row over the same documents. The run with more documents is kept, then the later one; shards
    (disjoint `offset` ranges) are all kept."""
    if rows.empty or "n_samples" not in rows:
        return rows
    rows = rows.reset_index(drop=True)
    start = pd.to_numeric(rows["offset"], errors="coerce").fillna(0) if "offset" in rows else pd.Series(0, index=rows.index)
    size = pd.to_numeric(rows["n_samples"], errors="coerce").fillna(0)
    finished = rows["finished_at"].astype(str) if "finished_at" in rows else pd.Series("", index=rows.index)
    keep = []
    for _, group in rows.groupby(_repeat_key(rows), sort=False):
        newest_first = sorted(group.index, key=lambda i: finished[i], reverse=True)
        taken: list[tuple[float, float]] = []
        for i in sorted(newest_first, key=lambda i: -size[i]):  # stable: among equal sizes the newest first
            lo, hi = start[i], start[i] + size[i]
            if all(hi <= a or lo >= b for a, b in taken):
                taken.append((lo, hi))
                keep.append(i)
    return rows.loc[sorted(keep)]


def _task_docs(rows: pd.DataFrame) -> int | None:
    values = pd.to_numeric(rows["task_docs"], errors="coerce").dropna() if "task_docs" in rows else []
    return int(max(values)) if len(values) else None


def _loaded(rows: pd.DataFrame) -> bool | None:
    """True if any run was timed on a loaded machine, False if every run records an unloaded one."""
    flags = rows["machine_loaded"].astype(str) if "machine_loaded" in rows else pd.Series("", index=rows.index)
    if (flags == "True").any():
        return True
    return False if len(flags) and (flags == "False").all() else None


def _repeat_speed(rows: pd.DataFrame, tokens: str, wall: str, own: str) -> pd.Series:
    """Tokens/s per repeat: summed tokens / summed wall time; a repeat of one row keeps the runner's own figure."""
    numeric = rows[[tokens, wall]].apply(pd.to_numeric, errors="raise")
    per_repeat = numeric.groupby(_repeat_key(rows)).sum()
    speed = per_repeat[tokens] / per_repeat[wall]
    if own in rows.columns:
        single = rows.groupby(_repeat_key(rows))[own].agg(["count", "first"])
        one = single["count"] == 1
        speed[one] = pd.to_numeric(single.loc[one, "first"])
    return speed


def _math_verify(rows: pd.DataFrame) -> tuple[str, ...]:
    if "math_verify" not in rows:
        return ()
    return tuple(sorted({str(v) for v in rows["math_verify"] if isinstance(v, str) and v and v != "nan"}))


def _batch_size(rows: pd.DataFrame) -> int | None:
    values = pd.to_numeric(rows["batch_size"], errors="coerce").dropna() if "batch_size" in rows else []
    return int(max(values)) if len(values) else None


def _timed(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that carry a batch-1 timing pass (runs with `timing_docs`)."""
    if any(c not in rows.columns for c in TIMING_COLUMNS):
        return rows.iloc[0:0]
    return rows[pd.to_numeric(rows["timing_n_samples"], errors="coerce").fillna(0) > 0]


def _sandbox(rows: pd.DataFrame) -> tuple[tuple[str, int], ...]:
    """Samples per sandbox verdict summed over the pooled runs (runs.csv `sandbox_*`; runs without them add 0)."""
    present = [c for c in SANDBOX_COLUMNS if c in rows.columns]
    totals = [(c.removeprefix("sandbox_"), int(pd.to_numeric(rows[c], errors="coerce").fillna(0).sum()))
              for c in present]
    return tuple((status, n) for status, n in totals if n > 0)


def _latency(rows: pd.DataFrame) -> float:
    """Mean per-document latency over the pooled runs (each run's `latency_s_mean` weighted by its documents);
    nan when no run records it."""
    if "latency_s_mean" not in rows:
        return math.nan
    latency = pd.to_numeric(rows["latency_s_mean"], errors="coerce")
    docs = pd.to_numeric(rows["n_samples"], errors="coerce")
    known = latency.notna() & docs.notna() & (docs > 0)
    return float((latency[known] * docs[known]).sum() / docs[known].sum()) if known.any() else math.nan


def _forward_positions(rows: pd.DataFrame) -> float:
    """Query positions the network computed per document over the pooled runs (runs.csv `forward_positions_total`);
    nan when a run lacks it (runs from before the column)."""
    if "forward_positions_total" not in rows:
        return math.nan
    total = pd.to_numeric(rows["forward_positions_total"], errors="coerce")
    docs = pd.to_numeric(rows["n_samples"], errors="coerce")
    return float(total.sum() / docs.sum()) if total.notna().all() and docs.sum() > 0 else math.nan


def aggregate_runs(rows: pd.DataFrame) -> Aggregate:
    """Pool the runs.csv rows of one setting.

    Shards (same seed, different `offset`) are summed into one repeat; repeats (different seeds or results
    folders) are pooled. Accuracy = all correct / all scored documents; its Wilson interval uses the number
    of distinct documents of one repeat, since repeating the same documents adds no independent evidence.
    Tokens/s is each repeat's own `tokens_per_s` (sharded repeats: summed tokens / summed wall time), then
    mean and standard deviation over repeats; where runs carry a batch-1 timing pass (the batched mode), the
    same over their `timing_*` columns instead, so a batched pass's own tokens/s never enters such a cell.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"runs.csv rows lack columns {missing}; expected the runner's schema (docs/runner.md)")
    if rows.empty:
        raise ValueError("no runs to aggregate")
    rows = without_overlaps(rows)
    numeric = rows[list(REQUIRED_COLUMNS[1:])].apply(pd.to_numeric, errors="raise")
    per_repeat = numeric.groupby(_repeat_key(rows)).sum()
    n = per_repeat["n_samples"]
    acc = per_repeat["n_correct"] / n
    batch, timed = _batch_size(rows), _timed(rows)
    timing_docs = agreement = None
    if not timed.empty:  # the batched mode: throughput only from the batch-1 passes
        throughput = "timed"
        speed = _repeat_speed(timed, "timing_tokens_total", "timing_wall_time_s_total", "timing_tokens_per_s")
        docs_timed = pd.to_numeric(timed["timing_n_samples"])
        timing_docs = int(round(float(docs_timed.groupby(_repeat_key(timed)).sum().mean())))
        rates = pd.to_numeric(timed.get("timing_agreement", pd.Series(dtype=str)), errors="coerce")
        known = rates.notna()
        if known.any():
            agreement = float((rates[known] * docs_timed[known]).sum() / docs_timed[known].sum())
    else:
        throughput = "batched" if batch is not None and batch > 1 else "batch1"
        speed = _repeat_speed(rows, "tokens_total", "wall_time_s_total", "tokens_per_s")
    total_n = float(n.sum())
    pooled = float(per_repeat["n_correct"].sum()) / total_n
    docs = float(n.mean())
    low, high = wilson_interval(pooled * docs, docs)
    return Aggregate(
        n_samples=int(round(docs)),
        n_repeats=len(per_repeat),
        accuracy=100.0 * pooled,
        accuracy_ci_low=100.0 * low,
        accuracy_ci_high=100.0 * high,
        accuracy_sd=100.0 * float(acc.std(ddof=1)) if len(acc) > 1 else math.nan,
        tokens_per_s=float(speed.mean()),
        tokens_per_s_sd=float(speed.std(ddof=1)) if len(speed) > 1 else math.nan,
        nfe_total=float(per_repeat["nfe_total"].mean()),
        nfe_mean=float(per_repeat["nfe_total"].sum()) / total_n,
        tokens_per_forward=float(per_repeat["tokens_total"].sum() / per_repeat["nfe_total"].sum()),
        run_ids=tuple(sorted(set(rows["run_id"].astype(str)))),
        forward_positions_mean=_forward_positions(rows),
        latency_s=_latency(rows),
        task_docs=_task_docs(rows),
        loaded=_loaded(rows),
        batch_size=batch,
        throughput=throughput,
        timing_docs=timing_docs,
        timing_agreement=agreement,
        sandbox=_sandbox(rows),
        math_verify=_math_verify(rows),
    )
