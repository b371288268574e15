"""MLflow: one MLflow run per dllm-bench run (found again by its ``dllm_bench.run_id`` tag, so a resumed run
updates its MLflow run), in an experiment named after the results name. The default store is the SQLite file
``<output_dir>/mlflow.db`` (MLflow 3 keeps its ./mlruns file store in maintenance mode and refuses it unless
MLFLOW_ALLOW_FILE_STORE=true; ``tracking.uri=file:...`` with that variable set uses it)."""

from __future__ import annotations

from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from dllm_bench.tracking import TrackingSettings
from dllm_bench.tracking.record import TAG_PREFIX, TrackedRun

BATCH = 100  # params (and tags) per log_batch call that every MLflow store accepts


def default_uri(output_dir: Path) -> str:
    return f"sqlite:///{output_dir / 'mlflow.db'}"


def log_run(settings: TrackingSettings, run: TrackedRun, output_dir: Path) -> str:
    uri = settings.get("uri") or default_uri(output_dir)
    client = MlflowClient(uri)
    experiment_name = settings.get("experiment") or run.name
    experiment = client.get_experiment_by_name(experiment_name)
    experiment_id = (experiment.experiment_id if experiment is not None else
                     client.create_experiment(experiment_name, artifact_location=(output_dir / "mlartifacts").as_uri()))
    found = client.search_runs([experiment_id], filter_string=f"tags.`{TAG_PREFIX}run_id` = '{run.run_id}'",
                               max_results=1)
    mlflow_run_id = found[0].info.run_id if found else client.create_run(experiment_id, run_name=run.run_id).info.run_id
    known = found[0].data.params if found else {}
    params = [Param(k, v) for k, v in run.params.items() if known.get(k) != v]  # a param is written once
    metrics = [Metric(k, v, 0, 0) for k, v in run.metrics.items()]
    tags = [RunTag(k, v) for k, v in run.tags.items()]
    for start in range(0, max(len(params), len(metrics), len(tags)), BATCH):  # MLflow's per-call limit
        client.log_batch(mlflow_run_id, params=params[start:start + BATCH], metrics=metrics[start:start + BATCH],
                         tags=tags[start:start + BATCH])
    client.set_terminated(mlflow_run_id)
    return f"{uri}#{experiment_id}/{mlflow_run_id}"
