"""`make demo`: sweep decoding rules x caches on the embedded tiny model; print a table, write CSVs and a Pareto plot.

    python scripts/demo.py             # resumes finished runs under results/demo/
    python scripts/demo.py --fresh     # deletes results/demo/ first
    python scripts/demo.py --limit 50  # fewer problems
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hydra import compose, initialize_config_dir  # noqa: E402

from dllm_bench.runner.config import CONF_DIR  # noqa: E402
from dllm_bench.runner.engine import loaded_models  # noqa: E402
from dllm_bench.runner.execute import execute  # noqa: E402

# (label, parameter shown in the table, overrides); every method runs without a cache and with the dual cache
METHODS = [
    ("sequential", "1 token/step", ["rule=topk", "policy.steps=24"]),
    ("threshold", "tau=0.9", ["rule=threshold", "rule.tau=0.9"]),
    ("threshold", "tau=0.7", ["rule=threshold", "rule.tau=0.7"]),
    ("factor", "f=1.0", ["rule=factor", "rule.f=1.0"]),
    ("frechet", "delta=0.25", ["rule=frechet", "rule.delta=0.25"]),
    ("frechet", "delta=0.1", ["rule=frechet", "rule.delta=0.1"]),
    ("slowfast", "code preset", ["policy=slowfast_code", "rule=none"]),
    ("oracle", "floor", ["rule=oracle"]),
]
CACHES = ("none", "dual")
TABLE_COLUMNS = ("method", "param", "cache", "accuracy", "ci95", "nfe_mean", "tokens_per_forward", "tokens_per_s",
                 "latency_s_mean", "run_id")


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


def format_table(table: list[dict]) -> list[dict]:
    out = []
    for r in table:
        out.append({
            "method": r["method"], "param": r["param"], "cache": r["cache"],
            "accuracy": f"{r['accuracy']:.3f}", "ci95": f"[{r['accuracy_ci_low']:.3f}, {r['accuracy_ci_high']:.3f}]",
            "nfe_mean": f"{r['nfe_mean']:.2f}", "tokens_per_forward": f"{r['tokens_per_forward']:.3f}",
            "tokens_per_s": f"{r['tokens_per_s']:.1f}", "latency_s_mean": f"{r['latency_s_mean']:.3f}",
            "run_id": r["run_id"],
        })
    return out


def print_table(rows: list[dict]) -> None:
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in TABLE_COLUMNS}
    print("  ".join(c.ljust(widths[c]) for c in TABLE_COLUMNS))
    print("  ".join("-" * widths[c] for c in TABLE_COLUMNS))
    for r in rows:
        print("  ".join(r[c].ljust(widths[c]) for c in TABLE_COLUMNS))


def plot(runs_csv: Path, out_dir: Path) -> str:
    """The reports layer's Pareto plot when present; otherwise a minimal accuracy-vs-NFE scatter."""
    script = REPO / "scripts" / "plot_pareto.py"
    if script.exists():
        done = subprocess.run([sys.executable, str(script), "--runs", str(runs_csv), "--out-dir", str(out_dir)],
                              cwd=REPO, capture_output=True, text=True)
        if done.returncode == 0:
            return f"scripts/plot_pareto.py -> {out_dir}"
        print(f"scripts/plot_pareto.py failed ({done.stderr.strip()[-300:]}); plotting minimally instead")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(runs_csv, newline="") as f:
        runs = list(csv.DictReader(f))
    fig, ax = plt.subplots(figsize=(6, 4))
    for cache, marker in (("none", "o"), ("dual", "s")):
        pts = [r for r in runs if r["cache.name"] == cache]
        ax.scatter([float(r["nfe_mean"]) for r in pts], [float(r["accuracy"]) for r in pts], marker=marker,
                   label=f"cache={cache}")
        for r in pts:
            ax.annotate(r["rule.name"] if r["rule.name"] != "none" else r["policy.name"], (float(r["nfe_mean"]), float(r["accuracy"])), fontsize=7)
    ax.set_xlabel("mean NFE per sample")
    ax.set_ylabel("accuracy")
    ax.legend()
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / "demo_pareto_nfe.png", dpi=120, bbox_inches="tight")
    return f"minimal plot (scripts/plot_pareto.py unavailable) -> {out_dir / 'demo_pareto_nfe.png'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=200, help="problems per run (default 200)")
    parser.add_argument("--output-dir", default=str(REPO / "results"))
    parser.add_argument("--fresh", action="store_true", help="delete results/demo first")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, one CPU thread each (default 2)")
    parser.add_argument("--methods", help="comma-separated subset of: " + ", ".join(dict.fromkeys(m for m, _, _ in METHODS)))
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run (e.g. batch_size=25)")
    args = parser.parse_args(argv)
    known = [m for m, _, _ in METHODS]
    wanted = args.methods.split(",") if args.methods else known
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        parser.error(f"--methods {','.join(unknown)}: unknown; choose from {', '.join(dict.fromkeys(known))}")
    methods = [m for m in METHODS if m[0] in wanted]
    output_dir = Path(args.output_dir).resolve()
    demo_dir = output_dir / "demo"
    if args.fresh and demo_dir.exists():
        shutil.rmtree(demo_dir)
    start = time.perf_counter()
    print(f"dllm-bench demo: {len(methods)} settings x caches {CACHES} on {args.limit} tiny Sudoku problems, "
          f"{args.jobs} parallel job(s)")
    table = format_table(sweep(args.limit, output_dir, ["progress=false", *args.overrides], args.jobs, methods))
    sweep_s = time.perf_counter() - start
    print()
    print_table(table)
    summary_csv = demo_dir / "demo_table.csv"
    with open(summary_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=TABLE_COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    plotted = plot(demo_dir / "runs.csv", demo_dir / "plots")
    print(f"\nruns: {demo_dir / 'runs.csv'}\ntable: {summary_csv}\nplot: {plotted}")
    print(f"sweep {sweep_s:.1f}s, total {time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
