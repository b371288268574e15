"""Resolve every cell of a table against the runs on disk: pooled result, or why it is missing and how to fill it."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from dllm_bench.models.loading import checkpoint_fingerprint
from dllm_bench.report.aggregate import Aggregate, aggregate_runs
from dllm_bench.report.published import PublishedRow
from dllm_bench.report.runs import compose_configs, matching_rows, override_value
from dllm_bench.report.tables import BENCHMARK_SIZES, Cell, TableSpec, table_cells
from dllm_bench.runner.config import CONF_DIR

RUNNER_COMMAND = "dllm-bench"


@dataclass(frozen=True)
class CellResult:
    """A cell with its status: `ok` (runs found), `missing` (no run yet), `unavailable` (cannot run here)."""

    cell: Cell
    status: str
    aggregate: Aggregate | None
    command: str | None
    reason: str | None = None
    config: dict[str, Any] | None = None
    other: tuple[str, Aggregate] | None = None  # (the other scoring mode, its pooled result on the same runs)

    @property
    def full_size(self) -> int | None:
        """Documents a complete cell covers: the paper's benchmark size, else the task's document count."""
        if self.cell.published is not None:
            return BENCHMARK_SIZES.get(self.cell.published["task"])
        if self.aggregate is not None and self.aggregate.task_docs is not None:
            return self.aggregate.task_docs
        return task_size(json.dumps(self.config["task"], sort_keys=True)) if self.config else None

    @property
    def partial(self) -> bool:
        """True when the pooled run covers fewer documents than the paper's benchmark (or the task) has."""
        size = self.full_size
        return self.aggregate is not None and size is not None and self.aggregate.n_samples < size


@lru_cache(maxsize=64)
def task_size(task_json: str) -> int | None:
    """Number of documents of a task config (for runs recorded before runs.csv had `task_docs`)."""
    from dllm_bench.runner.validate import build_task

    try:
        return len(build_task(json.loads(task_json)).all_docs())
    except Exception:  # data not reachable here: the cell is shown without a completeness mark
        return None


def cell_command(spec: TableSpec, cell: Cell) -> str:
    """The runner command that fills this cell (quoted where the shell would split a value)."""
    parts = [RUNNER_COMMAND, f"experiment={spec.preset}"]
    for key, value in cell.overrides.items():
        text = override_value(value)
        parts.append(f"{key}={text}" if text.replace(".", "").replace("_", "").isalnum() else f"'{key}={text}'")
    return " ".join(parts)


def runner_check(config: dict[str, Any]) -> tuple[bool, str | None]:
    """(refused, message) from the runner's validation, which reads no weights.

    A ConfigError is a refusal; any other failure (e.g. task data unreachable while offline) is only noted,
    since the run itself may still succeed where the data can be fetched.
    """
    from dllm_bench.runner.validate import ConfigError, validate_config

    try:
        validate_config(config)
    except ConfigError as err:
        return True, f"the runner refuses this setting: {err}"
    except Exception as err:
        return False, f"the runner could not check this setting here ({type(err).__name__}: {err})"
    return False, None


def drop_stale(rows: pd.DataFrame, config: dict[str, Any]) -> tuple[pd.DataFrame, str | None]:
    """Drop runs made with other weights than the local checkpoint has now (by content fingerprint; a served
    cell's by its config.json alone, as its runs recorded it: runner/execute.py)."""
    served = (config.get("backend") or {}).get("name", "local") != "local"
    current = checkpoint_fingerprint(str(config.get("model", {}).get("name_or_path", "")), weights=not served)
    if rows.empty or current is None:
        return rows, None
    recorded = rows["model.fingerprint"] if "model.fingerprint" in rows.columns else pd.Series(None, index=rows.index)
    stale = rows[recorded.astype(str) != current]
    if stale.empty:
        return rows, None
    folders = ", ".join(f"{Path(s).parent}/{r}/" for s, r in zip(stale["source"], stale["run_id"]))
    return rows[recorded.astype(str) == current], (
        f"stale: these runs used other weights than the checkpoint has now ({folders}); delete them and their "
        f"runs.csv rows, then rerun")


def drop_rescored_twins(rows: pd.DataFrame) -> pd.DataFrame:
    """Drop rescorings whose generation run is among `rows` in the same mode (the same samples, scored twice)."""
    if rows.empty or "generation_run_id" not in rows.columns:
        return rows
    own = set(rows["run_id"].astype(str))
    twin = rows["generation_run_id"].astype(str).isin(own) & (rows["generation_run_id"].astype(str) != rows["run_id"])
    return rows[~twin]


def other_scoring(runs: pd.DataFrame, config: dict[str, Any]) -> tuple[str, Aggregate] | None:
    """The cell's setting under the other `task.scoring` mode (e.g. a rescoring), pooled; None without runs."""
    if runs.empty or "task.scoring" not in runs.columns:
        return None
    mode = "lm_eval" if config.get("task", {}).get("scoring", "lm_eval") == "paper" else "paper"
    other = {**config, "task": {**config.get("task", {}), "scoring": mode}}
    rows, _ = drop_stale(drop_rescored_twins(matching_rows(runs, other)), other)
    return None if rows.empty else (mode, aggregate_runs(rows))


def resolve_table(
    spec: TableSpec,
    runs: pd.DataFrame,
    published: list[PublishedRow] | None = None,
    conf_dir: Path = CONF_DIR,
    extra: dict[str, Any] | None = None,
) -> list[CellResult]:
    """Match each cell's composed config to runs.csv rows; never fills a cell from anything but its own runs.

    `extra` overrides apply to every runnable cell (e.g. a local `model.name_or_path`), in matching and commands.
    """
    cells = table_cells(spec, published) if spec.paper else table_cells(spec)
    if extra:
        cells = [c if c.unavailable else replace(c, overrides={**c.overrides, **extra}) for c in cells]
    runnable = [c for c in cells if c.unavailable is None]
    configs: dict[int, dict[str, Any] | str] = {}
    if runnable:
        try:
            composed = compose_configs([(spec.preset, c.overrides) for c in runnable], conf_dir)
            configs = {id(c): cfg for c, cfg in zip(runnable, composed)}
        except Exception as exc:  # a broken preset must not hide the published numbers
            configs = {id(c): f"config does not compose: {exc}" for c in runnable}
    results = []
    for cell in cells:
        if cell.unavailable is not None:
            results.append(CellResult(cell, "unavailable", None, None, cell.unavailable))
            continue
        command = cell_command(spec, cell)
        config = configs[id(cell)]
        if isinstance(config, str):
            results.append(CellResult(cell, "unavailable", None, command, config))
            continue
        rows = drop_rescored_twins(matching_rows(runs, config))
        rows, stale = drop_stale(rows, config)
        if rows.empty and stale:
            results.append(CellResult(cell, "unavailable", None, command, stale, config))
            continue
        if not rows.empty:
            results.append(CellResult(cell, "ok", aggregate_runs(rows), command, None, config,
                                      other_scoring(runs, config)))
            continue
        refused, message = runner_check(config)
        if refused:
            results.append(CellResult(cell, "unavailable", None, command, message, config))
        else:
            reason = "needs a GPU (8B model)" if spec.needs_gpu else "not run yet"
            reason += f"; {message}" if message else ""
            results.append(CellResult(cell, "missing", None, command, reason, config))
    return results


def reference_result(spec: TableSpec, result: CellResult, results: list[CellResult]) -> CellResult | None:
    """The cell this cell's speedup is measured against (same row group, the table's reference method)."""
    ref = result.cell.speedup_ref or spec.speedup_ref
    if not ref:
        return None
    key = dict(zip(spec.row_fields, result.cell.row)) | dict(zip(spec.col_fields, result.cell.col))
    target = key | ref
    for other in results:
        other_key = dict(zip(spec.row_fields, other.cell.row)) | dict(zip(spec.col_fields, other.cell.col))
        if other_key == target:
            return other
    return None


def reproduced_value(spec: TableSpec, result: CellResult, results: list[CellResult], metric: str) -> float | None:
    """Our number for one metric of a cell, or None when its run (or its speedup reference run) is missing."""
    agg = result.aggregate
    if agg is None:
        return None
    if metric == "speedup":
        ref = reference_result(spec, result, results)
        if ref is None or ref.aggregate is None or ref.aggregate.tokens_per_s <= 0:
            return None
        return agg.tokens_per_s / ref.aggregate.tokens_per_s
    return float(getattr(agg, metric))
