"""Build the papers' tables (published / reproduced / delta) and run the missing cells this machine can run.

    python scripts/reproduce_table.py --all                 # every table; tiny cells run on CPU
    python scripts/reproduce_table.py --table fast_dllm_pp_t1 --dry-run   # print the commands only
    python scripts/reproduce_table.py --all --no-run        # build from the runs already on disk
    python scripts/reproduce_table.py --cells --write       # what every cell runs: docs/cells.md
    python scripts/reproduce_table.py --table fast_dllm_pp_t1 --batched 32 --timing-docs 100   # batched mode
    python scripts/reproduce_table.py --all --estimate      # GPU hours at batch 1 and in the batched mode
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = REPO / "results"
BENCH_DIR = REPO / "results" / "bench"
DEFAULT_TIMING_DOCS = 100  # the batched mode's batch-1 timing subsample (docs/reports.md, "Batched mode")
sys.path.insert(0, str(REPO))
# Building a table never downloads: config checks must not wait on the hub. Runs get the caller's environment.
RUN_ENV = dict(os.environ)
os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")

from dllm_bench.report.build import CellResult, resolve_table  # noqa: E402
from dllm_bench.report.estimate import (  # noqa: E402
    TARGET_RATIO,
    Speedups,
    read_speedups,
    speedup_needed,
    table_gpu_hours,
    table_gpu_hours_batched,
    timing_share,
)
from dllm_bench.report.memory import memory_report  # noqa: E402
from dllm_bench.report.pareto import plot_frontiers, plot_title, published_points, run_points  # noqa: E402
from dllm_bench.report.profile import TraceGroup, analyse_group, plot_profile, profile_markdown  # noqa: E402
from dllm_bench.report.render import settings_short, write_table  # noqa: E402
from dllm_bench.report.runs import compose_config, find_runs_csv, override_list, read_runs  # noqa: E402
from dllm_bench.report.tables import TABLES, TableSpec, get_table, table_cells  # noqa: E402
from dllm_bench.runner.progress import CellProgress  # noqa: E402
from dllm_bench.runner.store import pack_run, stored  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    given = argv if argv is not None else sys.argv
    which = parser.add_mutually_exclusive_group(required="--cells" not in given and "--aup" not in given)
    which.add_argument("--table", help=f"one of: {', '.join(TABLES)}")
    which.add_argument("--all", action="store_true", help="every table")
    parser.add_argument("--results-dir", default=str(DEFAULT_RESULTS), help="where the runner writes runs")
    parser.add_argument("--out", default=None,
                        help="Markdown/LaTeX/CSV output folder (default results/tables; with --batched "
                             "results/batched/tables, beside the committed batch-1 tables, never over them)")
    parser.add_argument("--no-run", action="store_true", help="build from existing runs only")
    parser.add_argument("--dry-run", action="store_true", help="print the commands of missing cells, run nothing")
    parser.add_argument("--gpu", action="store_true", help="also run GPU cells (default: only if CUDA is present)")
    parser.add_argument("--limit", type=int, default=None, help="documents per run (default: the whole task)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra overrides for every cell, e.g. model.name_or_path=/data/LLaDA-8B-Instruct")
    parser.add_argument("--batched", type=int, default=None, metavar="B",
                        help="batched mode: every cell decodes at batch B (accuracy, NFE) and times a batch-1 pass "
                             "over its first --timing-docs documents (tokens/s); marked § in the tables")
    parser.add_argument("--timing-docs", type=int, default=None, metavar="N",
                        help=f"batched mode: documents of the batch-1 timing pass (default {DEFAULT_TIMING_DOCS}, "
                             "at most --limit)")
    parser.add_argument("--bench-dir", default=str(BENCH_DIR),
                        help="where --estimate reads the measured batch speed-ups (results/bench)")
    parser.add_argument("--estimate", action="store_true",
                        help="print expected GPU hours per table at batch 1 and in the batched mode, and exit")
    parser.add_argument("--cells", action="store_true",
                        help="print what every paper-table cell runs (docs/cells.md) and exit")
    parser.add_argument("--write", action="store_true", help="with --cells: write docs/cells.md instead of printing")
    parser.add_argument("--aup", action="store_true",
                        help="recompute d3LLM's AUP leaderboard from results/published/d3llm_aup_leaderboard.csv into "
                             "results/published/d3llm_aup_leaderboard.md and exit")
    args = parser.parse_args(argv)
    if args.table:
        try:
            get_table(args.table)
        except ValueError as err:  # one line naming the bad name and the known tables, before any work
            print(f"{parser.prog}: error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
    if args.limit is not None and args.limit < 1:
        print(f"{parser.prog}: error: --limit {args.limit} is not allowed: an integer >= 1 is required",
              file=sys.stderr)
        raise SystemExit(2)
    args.extra = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        args.extra[key] = yaml.safe_load(value)
    check_batched_mode(parser, args)
    if args.out is None:
        args.out = str(REPO / "results" / ("batched" if args.batched else "") / "tables")
    return args


def _refuse(parser: argparse.ArgumentParser, message: str) -> None:
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_batched_mode(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check --batched/--timing-docs (one line, exit 2) and turn them into every cell's overrides; the timing
    subsample defaults to DEFAULT_TIMING_DOCS documents, at most --limit."""
    if args.batched is not None and args.batched < 2:
        _refuse(parser, f"--batched {args.batched} is not allowed: a batch size >= 2 is required (batch 1 is the "
                        "default mode)")
    if args.timing_docs is not None:
        if args.timing_docs < 1:
            _refuse(parser, f"--timing-docs {args.timing_docs} is not allowed: an integer >= 1 is required")
        if args.limit is not None and args.timing_docs > args.limit:
            _refuse(parser, f"--timing-docs {args.timing_docs} is not allowed: at most --limit {args.limit} "
                            "(the batch-1 pass times the first documents of each cell)")
        if args.batched is None and not args.estimate:
            _refuse(parser, f"--timing-docs {args.timing_docs} needs --batched B (the batch-1 timing pass belongs "
                            "to the batched mode)")
    default = DEFAULT_TIMING_DOCS if args.limit is None else min(DEFAULT_TIMING_DOCS, args.limit)
    args.timing_docs = default if args.timing_docs is None else args.timing_docs
    if args.batched is None:
        return
    clash = sorted({"batch_size", "timing_docs"} & set(args.extra))
    if clash:
        _refuse(parser, f"--set {clash[0]}=... is not allowed with --batched: --batched and --timing-docs set it")
    args.extra.update(batch_size=args.batched, timing_docs=args.timing_docs)


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def served_backend(extra: dict) -> bool:
    """Whether a server generates every cell (`--set backend=sglang|openai`): its GPU cells then run from a
    machine without one (docs/backends.md)."""
    return str(extra.get("backend", "local")) != "local"


def result_line(row: dict) -> str:
    """A finished run's figures, as the runner's summary line gives them."""
    return (f"accuracy {row['accuracy']:.4f} n={row['n_samples']} NFE {row['nfe_mean']:.2f} "
            f"tok/s {row['tokens_per_s']:.1f}")


def run_cell(spec: TableSpec, result: CellResult, results_dir: Path, limit: int | None,
             position: str = "") -> str | None:
    """Run one missing cell through the runner; its result line when it succeeded, None when it failed.

    GPU cells run as `python -m dllm_bench.run ...` (one process per 8B model, memory freed on exit); CPU
    cells (the tiny model) call the runner's `execute` in this process, as Hydra's basic sweep launcher does,
    which saves a torch start-up per cell.
    """
    extra = {"output_dir": str(results_dir), "progress": False}
    if limit is not None:
        extra["limit"] = limit
    overrides = {**result.cell.overrides, **extra}
    print(f"  {position} $ dllm-bench experiment={spec.preset} " + " ".join(override_list(overrides)), flush=True)
    if not spec.needs_gpu:
        from dllm_bench.runner.execute import execute

        try:
            return result_line(execute(compose_config(spec.preset, overrides)))
        except Exception as err:  # one failing cell must not stop the table
            print(f"  run failed ({type(err).__name__}: {err}); the cell stays missing", flush=True)
            return None
    cmd = [sys.executable, "-m", "dllm_bench.run", f"experiment={spec.preset}", *override_list(overrides)]
    done = subprocess.run(cmd, cwd=REPO, env=RUN_ENV, check=False, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        print(done.stdout, end="", flush=True)
        print(f"  run failed (exit {done.returncode}); the cell stays missing", flush=True)
        return None
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "done"
    return summary.split(": ", 1)[-1].split(" -> ")[0]  # the runner's line without its run id and folder


def machine_cannot(spec: TableSpec, can_gpu: bool) -> str | None:
    """Why this machine cannot run the table's missing cells; None when it can."""
    if spec.needs_gpu and not can_gpu:
        return "needs a GPU: no CUDA device here; --gpu runs it anyway"
    return None


def dry_run_command(spec: TableSpec, result: CellResult, args: argparse.Namespace) -> str:
    """The cell's command with this invocation's results folder and limit, so its run lands where the table
    reads; GPU cells say which key points a task at local files on an offline machine."""
    extra = []
    if Path(args.results_dir).resolve() != DEFAULT_RESULTS.resolve():
        extra.append(f"output_dir={args.results_dir}")
    if args.limit is not None:
        extra.append(f"limit={args.limit}")
    command = " ".join([result.command, *extra])
    if spec.needs_gpu and result.status == "missing":
        task = result.cell.overrides.get("task", "the task")
        command += f"  # offline: add task.data_dir=<folder with {task}'s files>"
    return command


def pack_table_runs(results: list[CellResult], results_dir: Path) -> None:
    """Pack the per-sample files of a table's finished runs (runner.store.pack_run): the committed tables keep
    theirs compressed, and every reader takes either form."""
    for r in results:
        if r.aggregate is not None and r.config is not None:
            for run_id in r.aggregate.run_ids:
                pack_run(results_dir / r.config["name"] / run_id)


def resolve(spec: TableSpec, args: argparse.Namespace) -> list[CellResult]:
    """The table's cells matched against the runs on disk."""
    return resolve_table(spec, read_runs(find_runs_csv(Path(args.results_dir))), extra=args.extra)


def runnable_cells(spec: TableSpec, results: list[CellResult], can_gpu: bool) -> list[CellResult]:
    """The missing cells this machine can run."""
    return [] if machine_cannot(spec, can_gpu) else [r for r in results if r.status == "missing"]


def dry_run(spec: TableSpec, results: list[CellResult], args: argparse.Namespace, can_gpu: bool) -> None:
    """Print each cell that is not filled, whether this machine can run it (and why not), and its command."""
    cannot = machine_cannot(spec, can_gpu)
    for r in results:
        if r.status == "ok":
            continue
        why = (cannot or "runnable here") if r.status == "missing" else r.reason or "unavailable"
        precision = (r.config or {}).get("confidence_precision", "float64")
        command = f": {dry_run_command(spec, r, args)}" if r.command else ""
        print(f"[{spec.name}] {r.status}, {why} (confidence_precision={precision}){command}")
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "missing", "unavailable")}
    if counts["ok"] == len(results):
        print(f"[{spec.name}] all {len(results)} cells filled")
        return
    runnable = len(runnable_cells(spec, results, can_gpu))
    blocked = counts["missing"] - runnable
    print(f"[{spec.name}] {counts['ok']} of {len(results)} cells filled, {counts['missing']} missing: {runnable} "
          f"runnable here, {blocked} not runnable here" + (f" ({cannot})" if blocked else "")
          + f"; {counts['unavailable']} unavailable")


def build(spec: TableSpec, args: argparse.Namespace, can_gpu: bool, results: list[CellResult],
          progress: CellProgress) -> list[CellResult]:
    """Run the table's missing cells this machine can run (each one's result and the ETA as it ends), then write
    the table, its plots and its profile."""
    results_dir = Path(args.results_dir)
    runnable = [] if args.no_run else runnable_cells(spec, results, can_gpu)
    progress.plan(spec.name, len(runnable))
    if runnable:
        print(f"[{spec.name}] running {len(runnable)} missing cell(s); {progress.eta()} in all", flush=True)
        start = time.perf_counter()
        ran = []
        for r in runnable:
            position = progress.start()
            outcome = run_cell(spec, r, results_dir, args.limit, position)
            label = f"{spec.name} {spec.label_row(r.cell.row)} | {spec.label_col(r.cell.col)}"
            print(progress.finish(label, outcome), flush=True)
            ran.append(outcome is not None)
        print(f"[{spec.name}] {sum(ran)} of {len(ran)} run(s) done in {time.perf_counter() - start:.0f} s", flush=True)
        results = resolve(spec, args)
        pack_table_runs(results, results_dir)
    paths = write_table(spec, results, args.out)
    write_frontiers(spec, results, results_dir, Path(args.out).parent / "plots")
    if spec.paper is None:
        write_profile(spec, results, results_dir, Path(args.out))
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "missing", "unavailable")}
    cannot = machine_cannot(spec, can_gpu)
    print(f"[{spec.name}] cells: {counts['ok']} with runs, {counts['missing']} missing"
          + (f" ({cannot})" if cannot and counts["missing"] else "")
          + f", {counts['unavailable']} unavailable -> {paths['md']}", flush=True)
    return results


def write_frontiers(spec: TableSpec, results: list[CellResult], results_dir: Path, plots: Path) -> None:
    """Pareto plot per task of the table's runs, with the table's published points of that task overlaid."""
    ids = {run_id for r in results if r.aggregate for run_id in r.aggregate.run_ids}
    if not ids:
        return
    runs = read_runs(find_runs_csv(results_dir))
    runs = runs[runs["run_id"].isin(ids)].drop_duplicates("run_id")
    for task, group in runs.groupby("task.name"):
        published = [r.cell.published for r in results if r.cell.published is not None
                     and r.cell.overrides.get("task") == task]
        stem = plots / (f"{spec.name}_pareto" if runs["task.name"].nunique() == 1 else f"{spec.name}_{task}_pareto")
        written = plot_frontiers(run_points(group), stem, published_points(published) or None,
                                 title=plot_title(spec.title, task, settings_short(results)))
        print(f"[{spec.name}] Pareto plot -> {written[0]}", flush=True)


def write_profile(spec: TableSpec, results: list[CellResult], results_dir: Path, out: Path) -> None:
    """Confidence-profile analysis of the table's traced Fréchet runs of one δ (the most runs; smallest δ on ties)."""
    by_delta: dict[float, list[Path]] = {}
    for r in results:
        if r.aggregate is None or r.config is None or r.config["rule"]["name"] != "frechet":
            continue
        for run_id in r.aggregate.run_ids:
            path = stored(results_dir / r.config["name"] / run_id / "traces.jsonl")  # plain or packed
            if path is not None:
                by_delta.setdefault(float(r.config["rule"]["delta"]), []).append(path)
    if not by_delta:
        print(f"[{spec.name}] no traced Fréchet run: no confidence-profile analysis", flush=True)
        return
    delta, files = max(sorted(by_delta.items()), key=lambda item: len(item[1]))
    group = TraceGroup(f"frechet δ={delta:g}", "frechet", {"delta": delta}, tuple(files))
    analysis = analyse_group(group)
    md = out / f"{spec.name}_profile.md"
    md.write_text(profile_markdown(analysis), encoding="utf-8")
    plot_profile(analysis, out.parent / "plots" / f"{spec.name}_profile", title=f"{spec.name}: {analysis.source}")
    print(f"[{spec.name}] confidence profiles of {len(files)} traced run(s) -> {md}", flush=True)


MEMORY_BATCH = 32  # the batch the memory check assumes without a batched mode (the largest GPU-check batch)


def _speedup_line(speedups: Speedups, batch: int) -> str:
    """Where the batch speed-ups came from, and their values at `batch`."""
    files = ", ".join(str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p) for p in speedups.paths)
    values = ", ".join(f"{shape} x{table[batch]:.2f}" for shape, table in sorted(speedups.by_shape.items())
                       if batch in table)
    if speedups.source == "gpu":
        return f"Speed-ups at batch {batch}: measured on the GPU by scripts/gpu_check.py ({files}): {values}."
    return (f"Speed-ups at batch {batch}: measured on the CPU by scripts/bench_batch.py on the tiny checkpoint "
            f"({files}): {values}; no GPU speed-up file (results/bench/gpu_generate_*.csv) yet, so every table "
            "uses this CPU figure, which is not the GPU's.")


def print_estimates(specs: list[TableSpec], limit: int | None = None, batch: int | None = None,
                    timing_docs: int = DEFAULT_TIMING_DOCS, bench_dir: Path | str = BENCH_DIR) -> None:
    """Expected GPU hours per table (at most `limit` documents per cell) at batch 1 and in the batched mode (batch
    `batch`, default the largest measured, + a batch-1 pass over `timing_docs` documents), from measured batch
    speed-ups; CPU tables say so. ValueError when `batch` has no measured speed-up."""
    speedups = read_speedups(bench_dir)
    batch = batch or (max(speedups.batches()) if speedups and speedups.batches() else None)
    per_cell = "whole benchmark" if limit is None else f"at most {limit} documents per cell"
    mode = (f"batched mode: batch {batch} + batch-1 timing on {timing_docs} documents" if batch
            else "batched mode")
    print(f"| table | runnable cells | expected GPU hours (paper's GPU; {per_cell}) | {mode} | ratio | "
          f"<= 1/3 | speed-up needed for 1/3 |\n|---|---|---|---|---|---|---|")
    single_all = batched_all = 0.0
    cells_all = 0
    verdicts: list[tuple[str, float]] = []
    for spec in specs:
        if not spec.needs_gpu:
            cells = sum(c.unavailable is None for c in table_cells(spec))
            print(f"| {spec.name} | {cells} | none: runs on the CPU (docs/reports.md gives a measured time) | | | | |")
            continue
        hours, counted, unknown = table_gpu_hours(spec, limit)
        if not counted:  # e.g. the field table: its methods' papers print no throughput for these cells
            print(f"| {spec.name} | {unknown} | no estimate: no cell has a printed throughput to scale | | | | |")
            continue
        extra = f" (+{unknown} cells without a printed throughput)" if unknown else ""
        share = timing_share(spec, timing_docs, limit)
        need = None if share is None else speedup_needed(share)
        needed = ("" if share is None else f"x{need:.2f}" if need is not None
                  else f"none: the batch-1 timing pass alone takes {share:.2f} of the batch-1 hours")
        if speedups is None or batch is None:
            print(f"| {spec.name} | {counted + unknown} | {hours:.1f}{extra} | no measured speed-up | | | {needed} |")
            continue
        single, batched, _ = table_gpu_hours_batched(spec, speedups, batch, timing_docs, limit)
        cells_all += counted + unknown
        ratio = batched / single if single else float("nan")
        single_all, batched_all = single_all + single, batched_all + batched
        verdicts.append((spec.name, ratio))
        print(f"| {spec.name} | {counted + unknown} | {hours:.1f}{extra} | {batched:.1f} | {ratio:.3f} | "
              f"{'met' if ratio <= TARGET_RATIO else 'not met'} | {needed} |")
    if speedups is None or batch is None:
        print("\nBatched mode: no measured batch speed-up under "
              f"{bench_dir} (run `make bench`, i.e. scripts/bench_batch.py, or scripts/gpu_check.py on a GPU).")
        print("\n" + memory_report(specs, batch or MEMORY_BATCH))
        return
    if verdicts:
        ratio = batched_all / single_all if single_all else float("nan")
        print(f"| all GPU tables | {cells_all} | {single_all:.1f} | {batched_all:.1f} | {ratio:.3f} | "
              f"{'met' if ratio <= TARGET_RATIO else 'not met'} | |")
    print("\n" + _speedup_line(speedups, batch))
    missed = [name for name, r in verdicts if r > TARGET_RATIO]
    worst = max(verdicts, key=lambda v: v[1]) if verdicts else None
    print("Target: every table in the batched mode within 1/3 of its batch-1 GPU hours: "
          + ("met" + (f" (highest ratio {worst[1]:.3f}, {worst[0]})" if worst else "") if not missed
             else f"not met for {', '.join(missed)}") + ".")
    print("\n" + memory_report(specs, batch))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cells:
        from dllm_bench.report.cells import cells_document

        if args.write:
            (REPO / "docs" / "cells.md").write_text(cells_document(), encoding="utf-8")
        else:
            print(cells_document(), end="")
        return 0
    if args.aup:
        from dllm_bench.report.leaderboard import (
            LEADERBOARD_MD,
            leaderboard_aup,
            leaderboard_markdown,
            load_leaderboard,
        )

        points = load_leaderboard()
        LEADERBOARD_MD.write_text(leaderboard_markdown(leaderboard_aup(points), points), encoding="utf-8")
        print(f"d3LLM AUP leaderboard -> {LEADERBOARD_MD}")
        return 0
    specs = list(TABLES.values()) if args.all else [get_table(args.table)]
    if args.estimate:
        try:
            print_estimates(specs, args.limit, args.batched, args.timing_docs, args.bench_dir)
        except ValueError as err:  # a batch size without a measured speed-up
            print(f"{Path(__file__).name}: error: {err}", file=sys.stderr)
            return 2
        return 0
    can_gpu = args.gpu or cuda_available() or served_backend(args.extra)
    resolved = {spec.name: resolve(spec, args) for spec in specs}
    if args.dry_run:
        for spec in specs:
            dry_run(spec, resolved[spec.name], args, can_gpu)
        return 0
    progress = CellProgress()
    for spec in specs:  # the whole plan first, so the first cell's ETA covers every table
        progress.plan(spec.name, 0 if args.no_run else len(runnable_cells(spec, resolved[spec.name], can_gpu)))
    for spec in specs:
        # a cell run for an earlier table may fill this one's: match again once anything ran
        results = resolve(spec, args) if progress.done else resolved[spec.name]
        build(spec, args, can_gpu, results, progress)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
