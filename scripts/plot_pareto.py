"""Pareto plots (accuracy vs tokens/s, tokens per forward, NFE) from runs.csv files; PNG + PDF under results/plots/.

    python scripts/plot_pareto.py                                   # one figure per results/<name>/runs.csv
    python scripts/plot_pareto.py --runs results/demo/runs.csv --where task.name=sudoku
    python scripts/plot_pareto.py --runs results/fast_dllm_pp_t1/runs.csv \\
        --published fast_dllm_pp_t1 --published-where task=gsm8k gen_length=256
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dllm_bench.report.pareto import plot_frontiers, published_points, run_points  # noqa: E402
from dllm_bench.report.published import load_published  # noqa: E402
from dllm_bench.report.runs import find_runs_csv, read_runs, same_value  # noqa: E402
from dllm_bench.report.tables import get_table  # noqa: E402


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"{flag} {item!r}: expected key=value")
        key, value = item.split("=", 1)
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="*", help="runs.csv files (default: every results/<name>/runs.csv)")
    parser.add_argument("--results-dir", default=str(REPO / "results"))
    parser.add_argument("--where", nargs="*", default=[], help="keep runs whose column equals a value: key=value")
    parser.add_argument("--published", help="overlay this table's published points (see reproduce_table.py)")
    parser.add_argument("--published-where", nargs="*", default=[], help="published CSV filters: column=value")
    parser.add_argument("--out-dir", default=str(REPO / "results" / "plots"))
    args = parser.parse_args(argv)

    files = [Path(p) for p in args.runs] if args.runs else find_runs_csv(args.results_dir)
    for path in files:
        if not path.is_file():
            raise SystemExit(f"--runs {path}: no such file")
    if not files:
        raise SystemExit(f"no runs.csv under {args.results_dir}; run the runner first (make demo)")
    published = None
    if args.published:
        spec = get_table(args.published)
        filters = _pairs(args.published_where, "--published-where")
        rows = [r for r in load_published() if r["paper"] == spec.paper and r["table"] == spec.table
                and all(r[k] == v for k, v in filters.items())]
        published = published_points(rows)
    where = _pairs(args.where, "--where")
    for path in files:
        runs = read_runs([path])
        for key, value in where.items():
            if key not in runs.columns:
                raise SystemExit(f"--where {key}: not a runs.csv column of {path}")
            runs = runs[runs[key].map(lambda cell, v=value: same_value(cell, v) or cell == v)]
        if runs.empty:
            print(f"{path}: no runs left after --where; skipped")
            continue
        stem = Path(args.out_dir) / f"{path.parent.name}_pareto"
        written = plot_frontiers(run_points(runs), stem, published, title=f"{path.parent.name}: {len(runs)} runs")
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
