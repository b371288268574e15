"""Expected GPU hours of a table, from the papers' own throughput: documents x tokens per document / tok/s; and
the same in the batched mode (decode at batch B, time at batch 1 on a subsample) from measured batch speed-ups."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from dllm_bench.report.tables import BENCHMARK_SIZES, Cell, TableSpec, table_cells
from dllm_bench.runner.config import CONF_DIR

TOK_PER_NFE = re.compile(r"Tok/NFE ([0-9.]+)")
# Speed-up files under results/bench/, most trusted first: the GPU check's `generate` tokens/s at the real shapes
# (scripts/gpu_check.py), then the CPU bench of the runner on the tiny checkpoint (scripts/bench_batch.py).
GPU_SPEEDUP_GLOB = "gpu_generate_*.csv"
CPU_SPEEDUP_FILE = "batch_speedup_cpu.csv"
TARGET_RATIO = 1 / 3  # issue 18: every table in the batched mode within a third of its batch-1 GPU hours


def cell_docs(cell: Cell, limit: int | None = None) -> int | None:
    """Documents a cell decodes: the paper's benchmark size, at most `limit`."""
    docs = BENCHMARK_SIZES.get(cell.published["task"]) if cell.published is not None else None
    return None if docs is None else docs if limit is None else min(docs, limit)


def cell_gpu_hours(cell: Cell, limit: int | None = None) -> float | None:
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
    return cell_docs(cell, limit) * tokens / speed / 3600.0


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


@dataclass(frozen=True)
class Speedups:
    """Measured `generate` tokens/s at batch B over batch 1, per model shape, and the files they came from."""

    source: str                              # "gpu" (scripts/gpu_check.py) or "cpu" (scripts/bench_batch.py)
    paths: tuple[Path, ...]
    by_shape: dict[str, dict[int, float]]    # shape -> batch size -> speed-up over batch 1

    def batches(self) -> list[int]:
        """Batch sizes above 1 measured for every shape."""
        common = set.intersection(*(set(v) for v in self.by_shape.values()))
        return sorted(b for b in common if b > 1)

    def factor(self, shape: str, batch: int) -> tuple[str, float]:
        """(shape measured, speed-up at `batch`): the cell's own shape where measured, else the only one."""
        used = shape if shape in self.by_shape else next(iter(self.by_shape)) if len(self.by_shape) == 1 else None
        if used is None:
            raise ValueError(f"no measured speed-up for shape {shape!r}; measured: {', '.join(sorted(self.by_shape))}")
        if batch not in self.by_shape[used]:
            raise ValueError(f"--batched {batch} is not allowed: no measured speed-up at batch {batch} "
                             f"(measured: {', '.join(map(str, sorted(self.by_shape[used])))})")
        return used, self.by_shape[used][batch]


def _speedup_table(frames: list[pd.DataFrame]) -> dict[str, dict[int, float]]:
    """shape -> batch -> tokens/s over batch-1 tokens/s (mean over the rows of one shape and batch); where the GPU
    check timed padded batches too (column ``padded``), only those: the runner pads its batches."""
    rows = pd.concat(frames, ignore_index=True)
    missing = {"shape", "batch", "tokens_per_s"} - set(rows.columns)
    if missing:
        raise ValueError(f"speed-up CSV lacks columns {sorted(missing)}; expected shape, batch, tokens_per_s")
    if "padded" in rows.columns and rows["padded"].astype(bool).any():
        rows = rows[rows["padded"].astype(bool)]
    out: dict[str, dict[int, float]] = {}
    for shape, group in rows.groupby("shape"):
        speed = group.groupby("batch")["tokens_per_s"].mean()
        if 1 in speed.index and speed[1] > 0:
            out[str(shape)] = {int(b): float(s / speed[1]) for b, s in speed.items()}
    return out


def read_speedups(bench_dir: Path | str) -> Speedups | None:
    """The measured speed-ups under `bench_dir`: the GPU check's files if any, else the CPU bench's; None if
    neither exists (nothing is assumed)."""
    bench_dir = Path(bench_dir)
    gpu = sorted(bench_dir.glob(GPU_SPEEDUP_GLOB))
    for source, paths in (("gpu", gpu), ("cpu", [bench_dir / CPU_SPEEDUP_FILE])):
        paths = [p for p in paths if p.is_file()]
        if paths:
            table = _speedup_table([pd.read_csv(p) for p in paths])
            if table:
                return Speedups(source, tuple(paths), table)
    return None


def _model_name(cell: Cell, spec: TableSpec, conf_dir: Path) -> str:
    if "model" in cell.overrides:
        return str(cell.overrides["model"])
    preset = yaml.safe_load((conf_dir / "experiment" / f"{spec.preset}.yaml").read_text(encoding="utf-8"))
    for item in preset.get("defaults", []):
        if isinstance(item, dict) and "override /model" in item:
            return str(item["override /model"])
    return "default"


def cell_shape(cell: Cell, spec: TableSpec, conf_dir: Path = CONF_DIR) -> str:
    """The GPU check's shape that stands for a cell's model: `dream-7b` for Dream, else `llada-8b`."""
    return "dream-7b" if "dream" in _model_name(cell, spec, conf_dir) else "llada-8b"


def batched_cell_hours(batch1_hours: float, docs: int, speedup: float, timing_docs: int) -> float:
    """A cell's hours in the batched mode: every document at the batch's speed-up, plus the batch-1 timing pass
    over the first `timing_docs` of them."""
    return batch1_hours / speedup + batch1_hours * min(timing_docs, docs) / docs


def table_gpu_hours_batched(spec: TableSpec, speedups: Speedups, batch: int, timing_docs: int,
                            limit: int | None = None) -> tuple[float, float, set[str]]:
    """(batch-1 hours, batched-mode hours, shapes whose speed-ups were used) over the cells with an estimate."""
    single = batched = 0.0
    shapes: set[str] = set()
    for cell in table_cells(spec):
        h = None if cell.unavailable else cell_gpu_hours(cell, limit)
        if h is None:
            continue
        shape, factor = speedups.factor(cell_shape(cell, spec), batch)
        shapes.add(shape)
        single += h
        batched += batched_cell_hours(h, cell_docs(cell, limit), factor, timing_docs)
    return single, batched, shapes


def timing_share(spec: TableSpec, timing_docs: int, limit: int | None = None) -> float | None:
    """The batch-1 timing pass's hours as a share of the table's batch-1 hours (None without an estimate)."""
    single = timed = 0.0
    for cell in table_cells(spec):
        h = None if cell.unavailable else cell_gpu_hours(cell, limit)
        if h is not None:
            docs = cell_docs(cell, limit)
            single, timed = single + h, timed + h * min(timing_docs, docs) / docs
    return timed / single if single else None


def speedup_needed(share: float, target: float = TARGET_RATIO) -> float | None:
    """The batch speed-up s with 1/s + share = target (the same s for every cell); None when the timing pass
    alone exceeds the target."""
    return 1.0 / (target - share) if share < target else None
