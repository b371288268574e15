"""`make frontier RULE=... TASK=...`: a rule's searched accuracy-NFE front on a task, as a table and a plot.

Runs `dllm-bench hparams_search=<rule>` (and with --grid the even grid of the same space at the same budget) into
`<out>/<model>_<task>/` (default results/frontier_local/, not committed: the committed searches under
results/frontier/ change only with `--out results/frontier`), then writes frontier.md, frontier_summary.csv, frontier_fronts.csv and frontier.png there
(dllm_bench/report/frontier.py). Rerunning resumes: finished studies run nothing. Prints the wall time and the
1-minute load average at the start and end (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dllm_bench.runner.config import CONF_DIR  # noqa: E402

DEFAULT_OUT = "results/frontier_local"  # ignored by git: a documented command never rewrites committed results
COMMITTED_OUT = "results/frontier"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rule", required=True, help=f"a search of conf/hparams_search/: {', '.join(options('hparams_search'))}")
    ap.add_argument("--task", default="sudoku", help="a task of conf/task/ (default sudoku)")
    ap.add_argument("--model", default="tiny_llada", help="a model of conf/model/ (default tiny_llada)")
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"output_dir (default {DEFAULT_OUT}; the committed searches: "
                    f"{COMMITTED_OUT})")
    ap.add_argument("--limit", type=int, default=200, help="documents per run (default 200)")
    ap.add_argument("--trials", type=int, default=None, help="budget of completed trials (default: the search's)")
    ap.add_argument("--grid", action="store_true", help="also run the even grid of the same space, same budget")
    ap.add_argument("--report-only", action="store_true", help="only rebuild the table and plot")
    ap.add_argument("overrides", nargs="*", help="more dllm-bench overrides (e.g. batch_size=50 num_threads=1)")
    args = ap.parse_args(argv)
    for value, group in ((args.rule, "hparams_search"), (args.task, "task"), (args.model, "model")):
        if value not in options(group):
            ap.exit(2, f"frontier: {group} {value!r} is not allowed; allowed: {', '.join(options(group))}\n")
    if args.limit < 1 or (args.trials is not None and args.trials < 1):
        ap.exit(2, f"frontier: --limit {args.limit} and --trials {args.trials} must be >= 1\n")
    return args


def search_command(args: argparse.Namespace, grid: bool) -> list[str]:
    """The dllm-bench command line of the search (or of its grid)."""
    cmd = [sys.executable, "-m", "dllm_bench.run", f"hparams_search={args.rule}", f"task={args.task}",
           f"model={args.model}", f"output_dir={args.out}", f"name={args.model}_{args.task}", f"limit={args.limit}",
           "progress=false", *args.overrides]
    if args.trials is not None:
        cmd.append(f"hydra.sweeper.n_trials={args.trials}")
    if grid:
        cmd.append("hydra.sweeper.grid=true")
    return cmd


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    if not args.report_only:
        for grid in ([False, True] if args.grid else [False]):
            cmd = search_command(args, grid)
            print("+", " ".join(cmd[2:]), flush=True)
            status = subprocess.call(cmd, env=env)
            if status:
                return status
    from dllm_bench.report.frontier import write_report

    folder = Path(args.out) / f"{args.model}_{args.task}"
    for path in write_report(folder, f"Frontier search: {args.model} on {args.task}"):
        print(f"wrote {path}")
    print((folder / "frontier.md").read_text(encoding="utf-8").split("\n\n")[2])
    elapsed = time.perf_counter() - start
    print(f"frontier: {elapsed:.0f} s wall on {os.cpu_count()} CPUs, 1-minute load average {load_start:.2f} at the "
          f"start, {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
