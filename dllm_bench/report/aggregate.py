"""Pool runs.csv rows of one setting across shards and seeds: accuracy with a binomial CI, speed mean and spread."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from dllm_bench.runner.summary import wilson_interval


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
    task_docs: int | None = None   # documents the task has (runs.csv `task_docs`; None for older runs)
    loaded: bool | None = None     # any pooled run timed on a loaded machine (None: not recorded)


REQUIRED_COLUMNS = ("run_id", "n_samples", "n_correct", "nfe_total", "tokens_total", "wall_time_s_total")


def _repeat_key(frame: pd.DataFrame) -> pd.Series:
    """Rows of one repeat: same seed and same results folder (shards of a run differ only in offset)."""
    seed = frame["seed"].astype(str) if "seed" in frame else pd.Series("0", index=frame.index)
    name = frame["name"].astype(str) if "name" in frame else pd.Series("", index=frame.index)
    return seed + "|" + name


def _task_docs(rows: pd.DataFrame) -> int | None:
    values = pd.to_numeric(rows["task_docs"], errors="coerce").dropna() if "task_docs" in rows else []
    return int(max(values)) if len(values) else None


def _loaded(rows: pd.DataFrame) -> bool | None:
    """True if any run was timed on a loaded machine, False if every run records an unloaded one."""
    flags = rows["machine_loaded"].astype(str) if "machine_loaded" in rows else pd.Series("", index=rows.index)
    if (flags == "True").any():
        return True
    return False if len(flags) and (flags == "False").all() else None


def aggregate_runs(rows: pd.DataFrame) -> Aggregate:
    """Pool the runs.csv rows of one setting.

    Shards (same seed, different `offset`) are summed into one repeat; repeats (different seeds or results
    folders) are pooled. Accuracy = all correct / all scored documents; its Wilson interval uses the number
    of distinct documents of one repeat, since repeating the same documents adds no independent evidence.
    Tokens/s is each repeat's own `tokens_per_s` (sharded repeats: summed tokens / summed wall time), then
    mean and standard deviation over repeats.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"runs.csv rows lack columns {missing}; expected the runner's schema (docs/runner.md)")
    if rows.empty:
        raise ValueError("no runs to aggregate")
    numeric = rows[list(REQUIRED_COLUMNS[1:])].apply(pd.to_numeric, errors="raise")
    per_repeat = numeric.groupby(_repeat_key(rows)).sum()
    n = per_repeat["n_samples"]
    acc = per_repeat["n_correct"] / n
    speed = per_repeat["tokens_total"] / per_repeat["wall_time_s_total"]
    if "tokens_per_s" in rows.columns:  # a repeat of one row keeps the runner's own figure
        single = rows.groupby(_repeat_key(rows))["tokens_per_s"].agg(["count", "first"])
        one = single["count"] == 1
        speed[one] = pd.to_numeric(single.loc[one, "first"])
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
        task_docs=_task_docs(rows),
        loaded=_loaded(rows),
    )
