"""Batch speed-up of the runner on the shipped tiny checkpoint: tokens/s at batch 1, 8, 32 on the same documents.

Each batch size runs the tiny table's preset (`experiment=tiny`, threshold 0.9, dual cache, no traces) through
the runner's own `execute` on the first `--docs` Sudoku puzzles, `--rounds` times in fresh folders (a rerun
would resume and decode nothing); the row keeps the best round (the least contended on a shared CPU) and the
median. `speedup` = tokens/s over batch 1's. The decoded tokens must not depend on the batch size: the script
stops if any round's token total differs. Writes results/bench/batch_speedup_cpu.csv, which
`scripts/reproduce_table.py --estimate` falls back to when no GPU speed-up file (gpu_generate_*.csv) exists.

With ``--caches``: tokens/s per cache at each batch size instead, on the same puzzles with LLaDA's one token per
step (rule topk, 24 steps: the rule dKV-Cache's loop runs; dKV-Cache-Greedy its drawn order, rule random_order),
each cache at its conf/cache/ preset; dKV-Cache's authors say its gain needs large batches. Writes results/bench/cache_batch_cpu.csv with the load average at the
start and end of every figure (speed is only meaningful on an idle machine: recorded, never asserted).

Usage:  python scripts/bench_batch.py                      (about a minute on an idle 2-core CPU)
        python scripts/bench_batch.py --docs 32 --rounds 1 --out /tmp/b
        python scripts/bench_batch.py --caches none dual dkv --batches 1 16
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dllm_bench.report.estimate import CPU_SPEEDUP_FILE  # noqa: E402
from dllm_bench.report.runs import compose_config  # noqa: E402
from dllm_bench.runner.execute import execute  # noqa: E402

SHAPE = "tiny-llada"
SETTINGS = {"rule": "threshold", "rule.threshold": 0.9, "cache": "dual", "trace": False, "progress": False, "warmup": 1}
# --caches: one token per step, the rule every cache runs with (dKV-Cache's loop only with topk)
CACHE_SETTINGS = {"rule": "topk", "policy.steps": 24, "trace": False, "progress": False, "warmup": 1}
# a cache whose published loop ranks otherwise (same count per step): dKV-Cache-Greedy commits in a drawn order
CACHE_RULES = {"dkv_greedy": "random_order"}
CACHE_BATCH_FILE = "cache_batch_cpu.csv"


def run_once(batch: int, docs: int, threads: int, out: Path, settings: dict | None = None) -> dict:
    """One runner execution at `batch` on the first `docs` puzzles: its runs.csv row."""
    overrides = {**(settings or SETTINGS), "batch_size": batch, "limit": docs, "num_threads": threads,
                 "output_dir": str(out), "name": f"bench_batch_{batch}"}
    return execute(compose_config("tiny", overrides))


def bench_caches(caches: list[str], batches: list[int], docs: int, rounds: int, threads: int) -> pd.DataFrame:
    """Rows of cache, batch, tokens/s (best and median of the rounds), speed-up over the cache's batch 1 and over
    no cache at the same batch, and the load average around each figure."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_cache_batch_") as tmp:
        for cache in caches:
            for batch in batches:
                load_start = os.getloadavg()[0]
                rule = CACHE_RULES.get(cache, CACHE_SETTINGS["rule"])
                runs = [run_once(batch, docs, threads, Path(tmp) / f"{cache}_b{batch}_r{r}",
                                 {**CACHE_SETTINGS, "cache": cache, "rule": rule}) for r in range(rounds)]
                speeds = [float(r["tokens_per_s"]) for r in runs]
                rows.append(dict(shape=SHAPE, cache=cache, batch=batch, docs=docs, answer=int(runs[0]["gen_length"]),
                                 block=int(runs[0]["block_length"]), rule=f"{rule} 24 steps", rounds=rounds,
                                 tokens_per_s=round(max(speeds), 1),
                                 tokens_per_s_median=round(statistics.median(speeds), 1),
                                 tokens_total=int(runs[0]["tokens_total"]),
                                 nfe_mean=round(float(runs[0]["nfe_mean"]), 3),
                                 forward_positions_mean=round(float(runs[0]["forward_positions_total"]) / docs, 1),
                                 load_average_1m_start=round(load_start, 2),
                                 load_average_1m_end=round(os.getloadavg()[0], 2)))
    frame = pd.DataFrame(rows)
    for cache, group in frame.groupby("cache"):
        if group["tokens_total"].nunique() != 1:
            raise SystemExit(f"cache {cache}: token totals differ between batch sizes: {group['tokens_total'].tolist()}")
    one = frame[frame["batch"] == 1].set_index("cache")["tokens_per_s"]
    none = frame[frame["cache"] == caches[0]].set_index("batch")["tokens_per_s"]
    frame["speedup_vs_batch1"] = (frame["tokens_per_s"] / frame["cache"].map(one)).round(3)
    frame[f"speedup_vs_{caches[0]}"] = (frame["tokens_per_s"] / frame["batch"].map(none)).round(3)
    return frame


def bench(batches: list[int], docs: int, rounds: int, threads: int) -> pd.DataFrame:
    """Rows of shape, batch, tokens/s (best and median of the rounds), speed-up over batch 1 and the machine."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp:
        for batch in batches:
            load_start = os.getloadavg()[0]
            runs = [run_once(batch, docs, threads, Path(tmp) / f"b{batch}_r{r}") for r in range(rounds)]
            speeds = [float(r["tokens_per_s"]) for r in runs]
            rows.append(dict(shape=SHAPE, batch=batch, docs=docs, answer=int(runs[0]["gen_length"]),
                             block=int(runs[0]["block_length"]), rule="threshold 0.9", cache="dual", rounds=rounds,
                             tokens_per_s=round(max(speeds), 1), tokens_per_s_median=round(statistics.median(speeds), 1),
                             tokens_total=int(runs[0]["tokens_total"]), nfe_mean=round(float(runs[0]["nfe_mean"]), 3),
                             load_average_1m_start=round(load_start, 2), load_average_1m_end=round(os.getloadavg()[0], 2)))
    frame = pd.DataFrame(rows)
    if frame["tokens_total"].nunique() != 1:
        raise SystemExit(f"token totals differ between batch sizes: {frame['tokens_total'].tolist()}; a prompt "
                         "must decode the same alone or batched")
    frame["speedup"] = (frame["tokens_per_s"] / float(frame.loc[frame["batch"] == 1, "tokens_per_s"].iloc[0])).round(3)
    return frame


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--docs", type=int, default=96, help="puzzles per run (a multiple of every batch size)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the tiny preset's 1)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--caches", nargs="+", default=None, metavar="PRESET",
                    help="tokens/s per cache preset (conf/cache/<PRESET>.yaml; the first is the reference, e.g. "
                         "none) at each batch size, one token per step; writes " + CACHE_BATCH_FILE)
    args = ap.parse_args(argv)
    if 1 not in args.batches or any(b < 1 or args.docs % b for b in args.batches) or args.rounds < 1:
        ap.error(f"--batches {args.batches} --docs {args.docs} --rounds {args.rounds}: batch 1 is required, every "
                 "batch size must divide --docs and --rounds must be >= 1")
    known = sorted(p.stem for p in (ROOT / "conf" / "cache").glob("*.yaml"))
    unknown = [c for c in args.caches or () if c not in known]
    if unknown:
        ap.error(f"--caches {' '.join(unknown)}: not a cache preset; choose from {', '.join(known)}")
    if args.caches:
        frame = bench_caches(args.caches, sorted(args.batches), args.docs, args.rounds, args.threads)
    else:
        frame = bench(sorted(args.batches), args.docs, args.rounds, args.threads)
    frame["device"] = platform.processor() or platform.machine() or "cpu"
    frame["cpu_count"] = os.cpu_count()
    frame["threads"] = args.threads
    frame["torch"] = torch.__version__
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / (CACHE_BATCH_FILE if args.caches else CPU_SPEEDUP_FILE), index=False)
    print(frame.to_string(index=False))
    return frame


if __name__ == "__main__":
    main()
