"""Experiment tracking (docs/tracking.md): each finished run's runs.csv row and provenance sent to MLflow,
TensorBoard or W&B. Off (``tracking=none``, the default) imports none of them and changes no file; a tracker's
settings are no part of a run's identity, so the same run has the same id, folder and rows with or without one.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dllm_bench.runner.errors import ConfigError
from dllm_bench.tracking.record import TrackedRun, tracked_run


@dataclass(frozen=True)
class Tracker:
    """A registered tracker: the package it needs (the pyproject extra of the same name installs it), its
    config keys beside ``name`` and the module whose ``log_run(settings, run)`` sends a run."""

    name: str
    package: str
    keys: tuple[str, ...]
    module: str

    def installed(self) -> bool:
        return importlib.util.find_spec(self.package) is not None


TRACKERS: dict[str, Tracker] = {
    t.name: t for t in (
        Tracker("mlflow", "mlflow", ("uri", "experiment"), "dllm_bench.tracking.mlflow_logger"),
        Tracker("tensorboard", "tensorboard", ("log_dir",), "dllm_bench.tracking.tensorboard_logger"),
        Tracker("wandb", "wandb", ("project", "mode", "dir"), "dllm_bench.tracking.wandb_logger"),
    )
}
OFF = "none"
WANDB_MODES = ("offline", "online")


@dataclass(frozen=True)
class TrackingSettings:
    """The chosen tracker and its keys (``None`` = the tracker's default, resolved against the run's folder)."""

    name: str
    values: Mapping[str, str | None]

    def get(self, key: str) -> str | None:
        return self.values.get(key)


def tracking_settings(group: Mapping[str, Any] | None) -> TrackingSettings | None:
    """The ``tracking`` group checked (a known name, its own keys, strings or null, the package installed);
    None when tracking is off. Raises the one-line ConfigError before any run starts."""
    if group is None:
        return None
    if not isinstance(group, Mapping):
        raise ConfigError(f"tracking={group!r} is not allowed: the config group 'tracking' must be selected "
                          "(see conf/tracking/)")
    name = group.get("name")
    if name == OFF and set(group) == {"name"}:
        return None
    names = (OFF, *TRACKERS)
    if name not in names:
        raise ConfigError(f"tracking.name={name!r} is not allowed: choose one of {', '.join(map(repr, names))}")
    allowed = ("name",) if name == OFF else ("name", *TRACKERS[name].keys)
    for key, value in group.items():
        if key not in allowed:
            raise ConfigError(f"tracking.{key}={value!r} is not allowed: unknown key for tracking {name!r}; "
                              f"allowed: {', '.join(sorted(allowed))}")
        if key != "name" and value is not None and not isinstance(value, str):
            raise ConfigError(f"tracking.{key}={value!r} is not allowed: a string or null is required")
    tracker = TRACKERS[name]
    if name == "wandb" and group.get("mode") not in (None, *WANDB_MODES):
        raise ConfigError(f"tracking.mode={group['mode']!r} is not allowed: choose one of "
                          f"{', '.join(map(repr, WANDB_MODES))}")
    if not tracker.installed():
        raise ConfigError(f"tracking.name={name!r} is not allowed here: the {tracker.package!r} package is not "
                          f"installed; pip install 'dllm-bench[{name}]'")
    return TrackingSettings(name, {k: v for k, v in group.items() if k != "name"})


def track(settings: TrackingSettings | None, row: Mapping[str, Any], run_json: Mapping[str, Any],
          output_dir: Path | str) -> str | None:
    """Send one finished run (its runs.csv ``row`` and ``run.json``) to the chosen tracker; returns where it
    went (the tracker's run address), None when tracking is off."""
    if settings is None:
        return None
    logger = importlib.import_module(TRACKERS[settings.name].module)
    return logger.log_run(settings, tracked_run(row, run_json), Path(output_dir).resolve())


__all__ = ["TRACKERS", "TrackedRun", "Tracker", "TrackingSettings", "track", "tracked_run", "tracking_settings"]
