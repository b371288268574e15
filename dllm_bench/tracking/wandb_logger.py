"""Weights & Biases: one W&B run per dllm-bench run (its id is the run id, so a resumed run updates it), offline
by default (``tracking.mode=offline``: files under ``<dir>/wandb/``, sent later with ``wandb sync``), the
configuration as its config, the row's numbers as its summary, the provenance as its notes' JSON."""

from __future__ import annotations

import json
from pathlib import Path

import wandb

from dllm_bench.tracking import TrackingSettings
from dllm_bench.tracking.record import TrackedRun


def log_run(settings: TrackingSettings, run: TrackedRun, output_dir: Path) -> str:
    folder = Path(settings.get("dir") or output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with wandb.init(project=settings.get("project") or "dllm-bench", group=run.name, name=run.run_id,
                    id=run.run_id, resume="allow", mode=settings.get("mode") or "offline", dir=str(folder),
                    config=dict(run.params), notes=json.dumps(run.tags, sort_keys=True),
                    settings=wandb.Settings(silent=True, console="off", x_disable_stats=True)) as tracked:
        tracked.summary.update(run.metrics)
        return str(Path(tracked.dir).parent)
