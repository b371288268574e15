"""What every tracker records of a run, from the same runs.csv row and run.json: the configuration as
parameters, the row's numbers as metrics, the rest of the row and the provenance as tags."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dllm_bench.runner.config import flatten

TAG_PREFIX = "dllm_bench."


@dataclass(frozen=True)
class TrackedRun:
    """One run as trackers take it: ``params`` (config key -> text, as runs.csv writes it), ``metrics`` (every
    numeric column of the row that is not configuration), ``tags`` (the row's other columns and the provenance:
    commit, machine, versions, data identity)."""

    run_id: str
    name: str
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]


def text(value: Any) -> str:
    """A value as one line of text: strings as they are, everything else as JSON (null, true, [1, 2])."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def is_metric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def tracked_run(row: Mapping[str, Any], run_json: Mapping[str, Any]) -> TrackedRun:
    """Split a runs.csv row into params / metrics / tags and add run.json's provenance as tags."""
    config = set(flatten(dict(run_json.get("config") or {})))
    params, metrics, tags = {}, {}, {}
    for key, value in row.items():
        if key in config:
            params[key] = text(value)
        elif is_metric(value):
            metrics[key] = float(value)
        elif value is not None:
            tags[TAG_PREFIX + key] = text(value)
    provenance = {"environment": run_json.get("environment") or {}, "identity": run_json.get("identity") or {},
                  "scoring_versions": run_json.get("scoring_versions") or {}}
    for key, value in flatten(provenance).items():
        if value is not None:
            tags[TAG_PREFIX + key] = text(value)
    return TrackedRun(str(row["run_id"]), str(row["name"]), params, metrics, tags)
