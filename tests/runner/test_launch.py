"""The Hydra app itself: --multirun sweeps (basic and joblib launchers), the SLURM launcher config, the CLI."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from dllm_bench.run import app


def run_app(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    """`dllm-bench <argv>` in this process (the basic launcher runs sweep jobs in-process)."""
    monkeypatch.setattr(sys, "argv", ["dllm-bench", *argv])
    try:
        app()
    finally:
        GlobalHydra.instance().clear()


def runs_csv(out: Path, name: str) -> list[dict]:
    with open(out / name / "runs.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_multirun_over_delta_writes_one_run_per_value(monkeypatch, llada_overrides, tmp_path):
    run_app(monkeypatch, "--multirun", *llada_overrides, "name=sweep", "limit=2", "batch_size=2", "warmup=0",
            "rule=frechet", "rule.delta=0.1,0.2,0.3")
    rows = runs_csv(tmp_path / "results", "sweep")
    assert sorted(r["rule.delta"] for r in rows) == ["0.1", "0.2", "0.3"]
    assert len({r["run_id"] for r in rows}) == 3
    assert sorted(p.name for p in (tmp_path / "results" / "sweep").iterdir() if p.is_dir() and
                  not p.name.startswith(".")) == sorted(r["run_id"] for r in rows)


def test_joblib_launcher_runs_jobs_in_parallel_processes(monkeypatch, llada_overrides, tmp_path):
    run_app(monkeypatch, "--multirun", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *llada_overrides,
            "name=joblib", "limit=2", "batch_size=2", "warmup=0", "rule=threshold,factor")
    rows = runs_csv(tmp_path / "results", "joblib")
    assert sorted(r["rule.name"] for r in rows) == ["factor", "threshold"]
    assert all(r["n_samples"] == "2" for r in rows)


def test_slurm_launcher_config_resolves_without_a_cluster(monkeypatch, capsys):
    run_app(monkeypatch, "hydra/launcher=slurm_gpu", "experiment=tiny", "--cfg", "all")
    text = capsys.readouterr().out
    assert "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher" in text
    assert "gpus_per_node: 1" in text and "tasks_per_node: 1" in text
    assert "name: tiny_table" in text and "rule:" in text and "policy:" in text


def test_config_error_exits_before_loading(monkeypatch, llada_overrides, capsys):
    with pytest.raises(SystemExit) as err:
        run_app(monkeypatch, *llada_overrides, "rule=frechet", "rule.delta=1.2")
    assert err.value.code == 2
    assert "dllm-bench: config error: policy=blocks, rule=frechet, cache=none: frechet delta must be in [0, 1), got 1.2" \
        in capsys.readouterr().err


@pytest.mark.parametrize("override, key", [("+selectr=frechet", "selectr='frechet' is not allowed: unknown key at the top level"),
                                           ("+cache.refresh_every=4",
                                            "cache.refresh_every=4 is not allowed: unknown key for cache 'none'")])
def test_unknown_key_exits_2_with_one_line(monkeypatch, llada_overrides, capsys, override, key):
    with pytest.raises(SystemExit) as err:
        run_app(monkeypatch, *llada_overrides, override)
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith(f"dllm-bench: config error: {key}; allowed: ")
