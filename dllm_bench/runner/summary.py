"""Per-run summary of sample rows: accuracy with a 95 % Wilson interval, NFE, tokens/forward, tokens/s."""

from __future__ import annotations

import math
from typing import Any

from dllm_bench.tasks.sandbox import STATUSES

Z95 = 1.959963984540054
# scoring=paper counts the `cut` rule exactly as the LLaDA evaluation did (runner/completions.paper_completion)
PAPER_CUT_COLUMN = "tokens_cut_paper"


def count_column(count_rule: str, scoring: str) -> str:
    """The samples.jsonl column a run's headline token count sums: `tokens_<rule>`, LLaDA's own for paper/cut."""
    return PAPER_CUT_COLUMN if scoring == "paper" and count_rule == "cut" else f"tokens_{count_rule}"


def wilson_interval(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (well-behaved at 0 and n, unlike the normal one)."""
    if n <= 0:
        return math.nan, math.nan
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def summarise(rows: list[dict[str, Any]], count_rule: str, scoring: str = "lm_eval") -> dict[str, Any]:
    """Summary columns of docs/runner.md for the rows of one run (order-independent).

    `tokens_total` sums the run's headline count (`count_column`: LLaDA's own `cut` count under scoring=paper);
    `tokens_cut_total` and `tokens_cut_paper_total` give both `cut` counts whatever the mode.
    """
    n = len(rows)
    correct = sum(bool(r["correct"]) for r in rows)
    low, high = wilson_interval(correct, n)
    # a served engine that reports no NFE leaves it unknown (NaN), never guessed
    nfe_total = sum(int(r["nfe"]) for r in rows) if all(r.get("nfe") is not None for r in rows) else math.nan
    tokens_total = sum(int(r[count_column(count_rule, scoring)]) for r in rows)
    both = {f"{col}_total": sum(int(r[col]) for r in rows) if all(col in r for r in rows) else math.nan
            for col in ("tokens_cut", PAPER_CUT_COLUMN)}
    wall_total = sum(float(r["wall_time_s"]) for r in rows)
    positions = (sum(int(r["forward_positions"]) for r in rows)
                 if rows and all(r.get("forward_positions") is not None for r in rows) else math.nan)
    return {
        "n_samples": n,
        "n_correct": correct,
        "accuracy": correct / n if n else math.nan,
        "accuracy_ci_low": low,
        "accuracy_ci_high": high,
        "nfe_mean": nfe_total / n if n else math.nan,
        "nfe_total": nfe_total,
        "steps_mean": (sum(int(r["steps"]) for r in rows) / n
                       if n and all(r.get("steps") is not None for r in rows) else math.nan),
        "tokens_total": tokens_total,
        "tokens_per_forward": tokens_total / nfe_total if nfe_total and not math.isnan(nfe_total) else math.nan,
        "forward_positions_total": positions,  # query positions the network computed, summed over rows and forwards
        "tokens_per_s": tokens_total / wall_total if wall_total > 0 else math.nan,
        "latency_s_mean": sum(float(r["latency_s"]) for r in rows) / n if n else math.nan,
        "wall_time_s_total": wall_total,
        **both,
        "count_rule": count_rule,
        **sandbox_counts(rows),
    }


def sandbox_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Code tasks: how many samples got each sandbox verdict (`sandbox_<status>`), and how many the published
    harness would have passed where this one did not (`sandbox_published_passed_ours_failed`: forged passes,
    docs/sandbox.md); empty for other tasks."""
    if not any("sandbox_status" in r for r in rows):
        return {}
    counts = {f"sandbox_{s}": sum(r.get("sandbox_status") == s for r in rows) for s in STATUSES}
    counts[PUBLISHED_ONLY] = sum(r.get("sandbox_published_passed") is True and r.get("sandbox_status") != "passed"
                                 for r in rows)
    return counts


def summarise_timing(timed: list[dict[str, Any]], rows: list[dict[str, Any]], count_rule: str,
                     scoring: str = "lm_eval") -> dict[str, Any]:
    """The batch-1 timing pass's columns (docs/runner.md, "Batched mode"): its own throughput, counted by the
    run's rule, and the share of its documents whose answer region equals the batched decode's
    (`raw_completion`: every answer id, special tokens kept; exact on CPU, a rate in bf16)."""
    n = len(timed)
    column = count_column(count_rule, scoring)
    tokens = sum(int(r[column]) for r in timed)
    wall = sum(float(r["wall_time_s"]) for r in timed)
    batched = {str(r["sample_id"]): r["raw_completion"] for r in rows}
    compared = [r for r in timed if str(r["sample_id"]) in batched]
    same = sum(r["raw_completion"] == batched[str(r["sample_id"])] for r in compared)
    return {
        "timing_batch_size": 1,
        "timing_n_samples": n,
        "timing_tokens_total": tokens,
        "timing_tokens_per_s": tokens / wall if wall > 0 else math.nan,
        "timing_latency_s_mean": sum(float(r["latency_s"]) for r in timed) / n if n else math.nan,
        "timing_wall_time_s_total": wall,
        "timing_agreement": same / len(compared) if compared else math.nan,
    }


TIMING_KEYS = ("tokens_per_s", "latency_s_mean", "wall_time_s_total", "timing_tokens_per_s", "timing_latency_s_mean",
               "timing_wall_time_s_total")
# runs.csv column order (docs/runner.md): run_id, name, the config keys sorted, these summary columns, then the
# run's bookkeeping.
SUMMARY_COLUMNS = ("n_samples", "n_correct", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "nfe_mean",
                   "nfe_total", "steps_mean", "tokens_total", "tokens_per_forward", "forward_positions_total", "tokens_per_s", "latency_s_mean",
                   "wall_time_s_total", "count_rule")
# code tasks: samples per sandbox verdict (docs/sandbox.md, "The verdict"), after the summary columns
PUBLISHED_ONLY = "sandbox_published_passed_ours_failed"
SANDBOX_COLUMNS = (*(f"sandbox_{s}" for s in STATUSES), PUBLISHED_ONLY)
# the batched mode's batch-1 timing pass (only in runs with `timing_docs`), after the summary columns
TIMING_PASS_COLUMNS = ("timing_batch_size", "timing_n_samples", "timing_tokens_total", "timing_tokens_per_s",
                       "timing_latency_s_mean", "timing_wall_time_s_total", "timing_agreement")
# a served run's server and its client-side throughput (runner/execute.served_columns; absent for local runs)
SERVED_COLUMNS = ("server_url", "server_model", "throughput_counted", "client_concurrency", "client_requests_per_s",
                  "client_output_tokens_per_s")
RUN_INFO_COLUMNS = ("task_docs", "world_size", "device_name", *SERVED_COLUMNS, "cpu_count", "num_threads_used",
                    "compile_warmup_s", "compile_timed_s", "load_avg_start", "load_avg_end", "machine_loaded",
                    "git_commit", "started_at", "finished_at")
