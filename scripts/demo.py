"""`make demo`: sweep decoding rules x caches on the embedded tiny model; print a table, write CSVs and a Pareto plot.

Accuracy, NFE and tokens/forward come from the sweep (`--jobs` runs at once); tokens/s and latency come from a
sequential timing pass (one run at a time, `--timing-limit` puzzles per setting), since runs sharing the CPUs
slow each other down unevenly. Each timed run records the load average at its start and end.

    python scripts/demo.py             # resumes finished runs under results/demo/
    python scripts/demo.py --fresh     # deletes results/demo/ first
    python scripts/demo.py --limit 50  # fewer problems
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hydra import compose, initialize_config_dir  # noqa: E402

from dllm_bench.report.pareto import plot_frontiers, run_points  # noqa: E402
from dllm_bench.report.runs import read_runs  # noqa: E402
from dllm_bench.runner.config import CONF_DIR  # noqa: E402
from dllm_bench.runner.engine import loaded_models  # noqa: E402
from dllm_bench.runner.environment import cpu_count, load_average  # noqa: E402
from dllm_bench.runner.execute import execute  # noqa: E402

# (label, parameter shown in the table, overrides); every method runs without a cache and with the dual cache
METHODS = [
    ("sequential", "1 token/step", ["rule=topk", "policy.steps=24"]),
    ("threshold", "threshold=0.9", ["rule=threshold", "rule.threshold=0.9"]),
    ("threshold", "threshold=0.7", ["rule=threshold", "rule.threshold=0.7"]),
    ("factor", "f=1.0", ["rule=factor", "rule.f=1.0"]),
    ("frechet", "delta=0.25", ["rule=frechet", "rule.delta=0.25"]),
    ("frechet", "delta=0.1", ["rule=frechet", "rule.delta=0.1"]),
    ("slowfast", "code preset", ["policy=slowfast_code", "rule=none"]),
    ("oracle", "floor", ["rule=oracle"]),
]
CACHES = ("none", "dual")
TABLE_COLUMNS = ("method", "param", "cache", "accuracy", "ci95", "nfe_mean", "tokens_per_forward", "tokens_per_s",
                 "latency_s_mean", "load", "run_id")
TIMING_NAME = "timing"  # the timing pass's runs: <output_dir>/demo/timing/<run_id>/ (name=timing there)
SPEED_COLUMNS = ("tokens_per_s", "latency_s_mean", "wall_time_s_total", "load_avg_start", "load_avg_end",
                 "machine_loaded", "cpu_count")


_WARM = False  # set once this process has run a warm-up batch (the model and allocator are then warm)


def run_one(job: tuple[str, str, list[str], str, int, Path, list[str]]) -> dict:
    """One method x cache run (in a worker process; each worker loads the model once and warms it once)."""
    global _WARM
    method, param, overrides, cache, limit, output_dir, extra = job
    start = time.perf_counter()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=demo", f"output_dir={output_dir}", f"limit={limit}",
                                           f"cache={cache}", *overrides, *extra, *(["warmup=0"] if _WARM else [])])
    row = execute(cfg)
    _WARM = bool(loaded_models())  # a model was loaded, so this process has decoded its warm-up batch
    print(f"  {method:<10} {param:<13} cache={cache:<4} acc={row['accuracy']:.3f} NFE={row['nfe_mean']:.2f} "
          f"({time.perf_counter() - start:.1f}s)", flush=True)
    return {"method": method, "param": param, "cache": cache, **row}


def sweep(limit: int, output_dir: Path, extra: list[str], jobs: int, methods: list[tuple]) -> list[dict]:
    """Every method x cache, spread over `jobs` single-threaded processes; rows in METHODS order."""
    todo = [(m, p, o, cache, limit, output_dir, extra) for m, p, o in methods for cache in CACHES]
    if jobs <= 1:
        return [run_one(job) for job in todo]
    # fork: workers inherit the imported modules instead of importing torch again
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("fork")) as pool:
        return list(pool.map(run_one, todo))


def with_timing(rows: list[dict], timed: list[dict]) -> list[dict]:
    """Sweep rows whose speed columns are replaced by the timing pass's (same settings, same order)."""
    out = []
    for row, t in zip(rows, timed):
        assert (row["method"], row["param"], row["cache"]) == (t["method"], t["param"], t["cache"])
        out.append({**row, **{k: t.get(k) for k in SPEED_COLUMNS}, "timing_n": t["n_samples"]})
    return out


def _load_text(r: dict) -> str:
    start, end = r.get("load_avg_start"), r.get("load_avg_end")
    return "?" if start is None or end is None else f"{float(start):.2f}/{float(end):.2f}"


def format_table(table: list[dict]) -> list[dict]:
    out = []
    for r in table:
        mark = "‡" if r.get("machine_loaded") is True else ""
        out.append({
            "method": r["method"], "param": r["param"], "cache": r["cache"],
            "accuracy": f"{r['accuracy']:.3f}", "ci95": f"[{r['accuracy_ci_low']:.3f}, {r['accuracy_ci_high']:.3f}]",
            "nfe_mean": f"{r['nfe_mean']:.2f}", "tokens_per_forward": f"{r['tokens_per_forward']:.3f}",
            "tokens_per_s": f"{r['tokens_per_s']:.1f}{mark}", "latency_s_mean": f"{r['latency_s_mean']:.3f}{mark}",
            "load": _load_text(r), "run_id": r["run_id"],
        })
    return out


def print_table(rows: list[dict]) -> None:
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in TABLE_COLUMNS}
    print("  ".join(c.ljust(widths[c]) for c in TABLE_COLUMNS))
    print("  ".join("-" * widths[c] for c in TABLE_COLUMNS))
    for r in rows:
        print("  ".join(r[c].ljust(widths[c]) for c in TABLE_COLUMNS))


def plot(runs_csv: Path, rows: list[dict], timed: list[dict], out_dir: Path, title: str) -> Path:
    """The Pareto plot of the sweep's runs, their tokens/s taken from the timing pass (`timed[i]` times the
    setting of `rows[i]`: its own run, since `limit` is part of a run's identity)."""
    runs = read_runs([runs_csv])
    speed = {r["run_id"]: t for r, t in zip(rows, timed)}
    for column in ("tokens_per_s", "machine_loaded"):
        before = runs[column] if column in runs else [""] * len(runs)
        runs[column] = [str(speed[i].get(column)) if i in speed else v for i, v in zip(runs["run_id"], before)]
    return plot_frontiers(run_points(runs), out_dir / "demo_pareto", title=title)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=200, help="problems per run (default 200)")
    parser.add_argument("--output-dir", default=str(REPO / "results"))
    parser.add_argument("--fresh", action="store_true", help="delete results/demo first")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, one CPU thread each (default 2)")
    parser.add_argument("--timing-limit", type=int, default=50,
                        help="puzzles per setting in the sequential timing pass (default 50; with --jobs 1 the "
                             "sweep itself is sequential and times every puzzle)")
    parser.add_argument("--methods", help="comma-separated subset of: " + ", ".join(dict.fromkeys(m for m, _, _ in METHODS)))
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run (e.g. batch_size=25)")
    args = parser.parse_args(argv)
    known = [m for m, _, _ in METHODS]
    wanted = args.methods.split(",") if args.methods else known
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        parser.error(f"--methods {','.join(unknown)}: unknown; choose from {', '.join(dict.fromkeys(known))}")
    methods = [m for m in METHODS if m[0] in wanted]
    for flag, value in (("--limit", args.limit), ("--timing-limit", args.timing_limit), ("--jobs", args.jobs)):
        if value < 1:
            parser.error(f"{flag} {value}: an integer >= 1 is required")
    output_dir = Path(args.output_dir).resolve()
    demo_dir = output_dir / "demo"
    if args.fresh and demo_dir.exists():
        shutil.rmtree(demo_dir)
    start = time.perf_counter()
    load_start = load_average()
    print(f"dllm-bench demo: {len(methods)} settings x caches {CACHES} on {args.limit} tiny Sudoku problems, "
          f"{args.jobs} parallel job(s); load average {load_start} on {cpu_count()} CPUs")
    extra = ["progress=false", *args.overrides]
    rows = sweep(args.limit, output_dir, extra, args.jobs, methods)
    sweep_s = time.perf_counter() - start
    if args.jobs > 1:
        timing_limit = min(args.timing_limit, args.limit)
        print(f"\ntiming pass: the same settings one at a time on {timing_limit} problems each")
        timed = sweep(timing_limit, demo_dir, [*extra, f"name={TIMING_NAME}"], 1, methods)
        speed_source = (f"a sequential timing pass ({timing_limit} problems per setting, one run at a time; "
                        f"runs under {demo_dir / TIMING_NAME})")
    else:
        timed = rows
        speed_source = "the sweep itself (one run at a time)"
    table = format_table(with_timing(rows, timed))
    print()
    print_table(table)
    print(f"\naccuracy, ci95, NFE, tokens/forward: {args.limit} problems per setting ({args.jobs} job(s) at once).\n"
          f"tokens_per_s, latency_s_mean: {speed_source}.\n"
          f"load: 1-minute load average at the start/end of each timed run, on {cpu_count()} CPUs; "
          "‡ = loaded (load above the CPU count): that figure is slower than the machine can do.")
    summary_csv = demo_dir / "demo_table.csv"
    with open(summary_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=TABLE_COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    png = plot(demo_dir / "runs.csv", rows, timed, demo_dir / "plots",
               title="make demo: tokens/s from " + ("the sequential timing pass" if timed is not rows else "the sweep"))
    print(f"\nruns: {demo_dir / 'runs.csv'}\ntable: {summary_csv}\nplot: {png}")
    print(f"sweep {sweep_s:.1f}s, total {time.perf_counter() - start:.1f}s; "
          f"load average {load_start} at the start, {load_average()} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
