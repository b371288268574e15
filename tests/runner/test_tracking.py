"""Experiment tracking (dllm_bench/tracking): off imports no tracker and is no part of a run; MLflow's local store,
TensorBoard's events and W&B's offline run hold the run's row (config as params, numbers as metrics)."""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import dllm_bench
from dllm_bench.runner.config import flatten
from dllm_bench.runner.validate import ConfigError
from dllm_bench.tracking import TRACKERS, tracking_settings
from dllm_bench.tracking.record import TAG_PREFIX, text, tracked_run

REPO = Path(__file__).resolve().parents[2]


def _needs(package: str) -> None:
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"the {package!r} package is absent: pip install 'dllm-bench[{package}]' to test tracking={package}")


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and ".hydra" not in p.parts}


@pytest.fixture(scope="module")
def untracked(tiny_llada_dir, tmp_path_factory):
    """One run made with tracking off, in a fresh process: its rows, its files, and what it imported."""
    out = tmp_path_factory.mktemp("tracking") / "results"
    keys = {"model.name_or_path": str(tiny_llada_dir), "output_dir": str(out), "limit": 4, "batch_size": 4,
            "num_threads": 1, "progress": False, "rule": "threshold", "name": "tracked"}
    script = ("import json, sys, dllm_bench\n"
              f"rows = dllm_bench.evaluate({keys!r})\n"
              "print(json.dumps({'run': rows.attrs['run'], 'imported': sorted(m for m in ('mlflow', 'wandb', "
              "'tensorboard') if m in sys.modules)}, default=str))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return keys, out, result["run"], result["imported"]


def _rerun(keys: dict, tracking: dict) -> dict:
    return dllm_bench.evaluate({**keys, **tracking}).attrs["run"]


def test_off_imports_no_tracker(untracked):
    _, out, run, imported = untracked
    assert imported == [] and run["n_samples"] == 4
    assert not (out / "mlflow.db").exists() and not (out / "tensorboard").exists() and not (out / "wandb").exists()


def test_mlflow_local_store_holds_the_row_and_changes_no_file(untracked):
    _needs("mlflow")
    from mlflow.tracking import MlflowClient

    keys, out, run, _ = untracked
    before = _files(out / "tracked")
    row = _rerun(keys, {"tracking": "mlflow"})
    assert row["run_id"] == run["run_id"] and _files(out / "tracked") == before  # same run, not a byte changed
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tracked")
    (found,) = client.search_runs([experiment.experiment_id])
    config = set(flatten(json.loads((out / "tracked" / run["run_id"] / "run.json").read_text())["config"]))
    assert found.data.params == {k: text(v) for k, v in row.items() if k in config}
    with open(out / "tracked" / "runs.csv", newline="") as f:
        (written,) = list(csv.DictReader(f))
    numeric = {k: float(written[k]) for k, v in row.items()
               if k not in config and isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert found.data.metrics == pytest.approx(numeric) and {"accuracy", "nfe_mean", "tokens_per_s"} <= set(numeric)
    assert found.data.tags[f"{TAG_PREFIX}run_id"] == run["run_id"]
    assert found.data.tags[f"{TAG_PREFIX}git_commit"] == written["git_commit"]
    assert f"{TAG_PREFIX}environment.versions.torch" in found.data.tags
    _rerun(keys, {"tracking": "mlflow"})  # a rerun updates the same MLflow run
    assert len(client.search_runs([experiment.experiment_id])) == 1


def test_tensorboard_events_hold_the_rows_numbers(untracked):
    _needs("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    keys, out, run, _ = untracked
    _rerun(keys, {"tracking": "tensorboard"})
    events = EventAccumulator(str(out / "tensorboard" / "tracked" / run["run_id"])).Reload()
    expected = tracked_run(run, json.loads((out / "tracked" / run["run_id"] / "run.json").read_text())).metrics
    scalars = {tag: events.Scalars(tag)[0].value for tag in events.Tags()["scalars"] if "/" not in tag}
    assert scalars == pytest.approx(expected, rel=1e-6)  # event files store float32


def test_wandb_offline_run_holds_the_row(untracked):
    _needs("wandb")
    keys, out, run, _ = untracked
    _rerun(keys, {"tracking": "wandb"})
    (record,) = (out / "wandb").glob(f"offline-run-*-{run['run_id']}/run-{run['run_id']}.wandb")
    data = record.read_bytes()
    tracked = tracked_run(run, json.loads((out / "tracked" / run["run_id"] / "run.json").read_text()))
    for key, value in [*tracked.params.items(), *tracked.metrics.items()]:
        assert key.encode() in data and json.dumps(value).encode() in data, key


def test_tracking_settings_refuse_in_one_line(monkeypatch):
    assert tracking_settings(None) is None and tracking_settings({"name": "none"}) is None
    with pytest.raises(ConfigError, match="tracking.name='sacred' is not allowed: choose one of 'none', 'mlflow'"):
        tracking_settings({"name": "sacred"})
    with pytest.raises(ConfigError, match="tracking.log_dir=.*unknown key for tracking 'mlflow'; allowed: experiment"):
        tracking_settings({"name": "mlflow", "log_dir": "x"})
    with pytest.raises(ConfigError, match="tracking.mode='sometimes' is not allowed"):
        tracking_settings({"name": "wandb", "mode": "sometimes", "project": None, "dir": None})
    monkeypatch.setitem(TRACKERS, "mlflow", replace(TRACKERS["mlflow"], package="dllm_bench_no_such_package"))
    with pytest.raises(ConfigError, match=r"not installed; pip install 'dllm-bench\[mlflow\]'"):
        tracking_settings({"name": "mlflow", "uri": None, "experiment": None})


def test_a_bad_tracking_key_is_refused_before_the_run(tiny_llada_dir, tmp_path):
    with pytest.raises(ConfigError, match="tracking.name='nope'"):
        dllm_bench.evaluate({"model.name_or_path": str(tiny_llada_dir), "output_dir": str(tmp_path),
                             "tracking.name": "nope"})
    assert not any(tmp_path.iterdir())


def test_every_tracker_has_its_config_and_extra():
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, tracker in TRACKERS.items():
        import yaml

        data = yaml.safe_load((REPO / "conf" / "tracking" / f"{name}.yaml").read_text())
        assert data["name"] == name and set(data) == {"name", *tracker.keys}
        assert any(dep.startswith(tracker.package) for dep in extras[name])
