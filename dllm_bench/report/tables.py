"""The reproducible tables, read from `dllm_bench/report/table_specs/<name>.yaml`: layout, metrics and each cell's run settings.

A table file names its preset (`conf/experiment/<preset>.yaml`, the table-wide settings) and lists its cells:
the row and column they occupy, the Hydra overrides of the run that fills them, the published row they sit
beside (the fields that pick it out of the published CSV), the scoring mode and notes on settings the paper
leaves unstated. This module holds only the generic reading and matching; what a cell runs is data.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from dllm_bench.report.published import PUBLISHED_CSV, PublishedRow, load_published
from dllm_bench.runner.config import CONF_DIR
from dllm_bench.tasks import TaskConfig

TABLE_DIR = Path(__file__).resolve().parent / "table_specs"  # paper-cell data; not a Hydra group
# Number of evaluation documents of each benchmark's test split as the papers ran them (for GPU-hour estimates).
BENCHMARK_SIZES = {
    "gsm8k": 1319, "math": 5000, "humaneval": 164, "mbpp": 500, "mathvista": 1000, "mathverse": 788,
    "gpqa": 448, "bbh": 6511, "mmlu": 14042, "mmlu_pro": 12032,
}
METRIC_LABELS = {
    "accuracy": "Acc. (%)",
    "tokens_per_s": "Tok/s",
    "nfe": "NFE",
    "speedup": "Speedup (x)",
    "tokens_per_forward": "Tok/NFE",
    "nfe_mean": "NFE/sample",
    "latency_s": "Latency (s)",
    "forward_positions_mean": "Fwd pos./sample",
}
CELL_KEYS = {"row", "col", "overrides", "published", "notes", "unavailable", "speedup_ref", "scoring"}
TABLE_KEYS = {"title", "preset", "paper", "table", "metrics", "row_header", "speedup_ref", "scoring", "needs_gpu",
              "cells", "published_file", "layout", "col_header"}
# "grid": the paper's layout (a line per row and metric, a column per cell column); "methods": a line per row and
# cell column, a column per metric (the layout a reader scans to compare methods)
LAYOUTS = ("grid", "methods")


@dataclass(frozen=True)
class Cell:
    """One cell group of a table: its layout key, the published row (if any) and the run that fills it."""

    row: tuple[str, ...]
    col: tuple[str, ...]
    published: PublishedRow | None
    overrides: dict[str, Any]
    unavailable: str | None = None
    assumptions: tuple[str, ...] = ()
    speedup_ref: dict[str, str] = field(default_factory=dict)
    scoring: str | None = None

    @property
    def layout(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(row key, column key) of the cell in the table grid."""
        return self.row, self.col


@dataclass(frozen=True)
class TableSpec:
    """A table as printed: title, metrics, the reference cell for speedups, the preset and the cells' data."""

    name: str
    title: str
    metrics: tuple[str, ...]
    preset: str
    cells_data: tuple[dict[str, Any], ...]
    paper: str | None = None
    table: str | None = None
    speedup_ref: dict[str, str] = field(default_factory=dict)
    row_header: str = "Setting"
    needs_gpu: bool = True
    scoring: str | None = None
    published_file: str | None = None  # a CSV in results/published/ other than the papers' (None = that one)
    layout: str = "grid"
    col_header: str = "Setting"
    row_fields: tuple[str, ...] = ("row",)
    col_fields: tuple[str, ...] = ("col",)

    def label_row(self, key: tuple[str, ...]) -> str:
        return " ".join(k for k in key if k)

    def label_col(self, key: tuple[str, ...]) -> str:
        return " ".join(k for k in key if k)


def _unknown(where: str, data: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        raise ValueError(f"{where}: unknown key(s) {extra}; allowed: {', '.join(sorted(allowed))}")


def load_table(path: Path) -> TableSpec:
    """One dllm_bench/report/table_specs/<name>.yaml as a TableSpec; unknown keys are errors naming the file."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    _unknown(str(path), data, TABLE_KEYS)
    for i, cell in enumerate(data["cells"]):
        _unknown(f"{path} cell {i}", cell, CELL_KEYS)
    return TableSpec(
        name=path.stem, title=data["title"], metrics=tuple(data["metrics"]), preset=data["preset"],
        cells_data=tuple(data["cells"]), paper=data.get("paper"), table=data.get("table"),
        speedup_ref=dict(data.get("speedup_ref") or {}), row_header=data.get("row_header", "Setting"),
        needs_gpu=bool(data.get("needs_gpu", True)), scoring=data.get("scoring"),
        published_file=data.get("published_file"), layout=_layout(path, data.get("layout", "grid")),
        col_header=data.get("col_header", "Setting"),
    )


def _layout(path: Path, layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"{path}: layout {layout!r}; allowed: {', '.join(LAYOUTS)}")
    return layout


def load_tables(table_dir: Path = TABLE_DIR) -> dict[str, TableSpec]:
    """Every table file, published tables first (file name order), the tiny table last."""
    specs = [load_table(p) for p in sorted(table_dir.glob("*.yaml"))]
    return {s.name: s for s in sorted(specs, key=lambda s: s.paper is None)}


TABLES: dict[str, TableSpec] = load_tables()


def task_available(task_option: str, conf_dir: Path = CONF_DIR) -> bool:
    """Whether the harness has a config for this task (conf/task/<option>.yaml)."""
    return (conf_dir / "task" / f"{task_option}.yaml").is_file()


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def published_row(spec: TableSpec, wanted: dict[str, Any], rows: list[PublishedRow]) -> PublishedRow:
    """The one published row of the table whose fields equal `wanted` (compared as printed text)."""
    found = [r for r in rows if r["paper"] == spec.paper and r["table"] == spec.table
             and all(r[k] == _text(v) for k, v in wanted.items())]
    if len(found) != 1:
        raise ValueError(f"table {spec.name}: published {wanted} matches {len(found)} rows of "
                         f"{spec.paper} {spec.table}, expected exactly 1")
    return found[0]


def scoring_overrides(scoring: str | None) -> dict[str, Any]:
    """`task.scoring` when the task config has that field (docs/tasks.md), else nothing: the mode stays data."""
    if scoring is None or "scoring" not in {f.name for f in fields(TaskConfig)}:
        return {}
    return {"task.scoring": scoring}


def make_cell(spec: TableSpec, data: dict[str, Any], rows: list[PublishedRow], conf_dir: Path = CONF_DIR) -> Cell:
    """A Cell from its table-file entry: the published row it names, its overrides, why it cannot run."""
    published = published_row(spec, data["published"], rows) if data.get("published") else None
    overrides = dict(data.get("overrides") or {})
    scoring = data.get("scoring", spec.scoring)
    unavailable = data.get("unavailable")
    if overrides:
        overrides.update(scoring_overrides(scoring))
        task = overrides.get("task")
        if unavailable is None and task is not None and not task_available(str(task), conf_dir):
            unavailable = f"no task '{task}' in this harness (conf/task/{task}.yaml missing)"
    return Cell((str(data["row"]),), (str(data["col"]),), published, overrides, unavailable,
                tuple(data.get("notes") or ()), dict(data.get("speedup_ref") or {}), scoring)


def published_path(spec: TableSpec) -> Path:
    """The CSV holding a table's published rows: its `published_file` in results/published/, else the papers'."""
    return PUBLISHED_CSV.parent / spec.published_file if spec.published_file else PUBLISHED_CSV


def table_cells(spec: TableSpec, published: list[PublishedRow] | None = None) -> list[Cell]:
    """Every cell of a table in file order."""
    if published is None and spec.paper:
        published = load_published(published_path(spec))
    rows = published if spec.paper else []
    cells = [make_cell(spec, data, rows) for data in spec.cells_data]
    if spec.paper and not any(c.published for c in cells):
        raise ValueError(f"table {spec.name}: no cell names a published row of {spec.paper} {spec.table}")
    return cells


def results_name(spec: TableSpec, conf_dir: Path = CONF_DIR) -> str:
    """The `name` its preset gives the runs: they land in results/<name>/runs.csv."""
    data = yaml.safe_load((conf_dir / "experiment" / f"{spec.preset}.yaml").read_text(encoding="utf-8"))
    return str(data.get("name", spec.preset))


def get_table(name: str) -> TableSpec:
    """Look a table up by name; the error lists every known table."""
    if name not in TABLES:
        raise ValueError(f"table={name!r} is unknown; choose one of {', '.join(TABLES)}")
    return TABLES[name]
