"""TensorBoard: one event-file folder per dllm-bench run, ``<log_dir>/<name>/<run_id>`` (default log_dir
``<output_dir>/tensorboard``): the row's numbers as scalars at step 0, the configuration as the HParams
dashboard's hyperparameters against those metrics, the provenance as one text summary."""

from __future__ import annotations

import json
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

from dllm_bench.tracking import TrackingSettings
from dllm_bench.tracking.record import TrackedRun


def log_run(settings: TrackingSettings, run: TrackedRun, output_dir: Path) -> str:
    folder = Path(settings.get("log_dir") or output_dir / "tensorboard") / run.name / run.run_id
    with SummaryWriter(log_dir=str(folder)) as writer:
        for key, value in run.metrics.items():
            writer.add_scalar(key, value, 0)
        writer.add_hparams(dict(run.params), {f"hparams/{k}": v for k, v in run.metrics.items()}, run_name=".")
        writer.add_text("provenance", "```\n" + json.dumps(run.tags, indent=1, sort_keys=True) + "\n```", 0)
    return str(folder)
