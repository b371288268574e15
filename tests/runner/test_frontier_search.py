"""The frontier search end to end (`dllm-bench hparams_search=<rule>`, dllm_bench/search/): trials are ordinary runs,
the study lives in SQLite under the results folder, and a rerun resumes it."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import optuna
import pytest
from hydra.core.global_hydra import GlobalHydra
from optuna.trial import TrialState

from dllm_bench.decoding.config import CACHES, RULES
from dllm_bench.report.frontier import load_studies, write_report
from dllm_bench.run import app
from dllm_bench.runner.config import CONF_DIR
from dllm_bench.runner.validate import validate_config
from dllm_bench.search.space import grid_points, levels, parse_space


def search(monkeypatch: pytest.MonkeyPatch, overrides: list[str], out: Path, *extra: str) -> None:
    """A Fréchet-δ search in this process: 2 puzzles per run, results under `out`."""
    argv = ["dllm-bench", "hparams_search=frechet", *overrides, f"output_dir={out}", "name=front", "limit=2",
            "batch_size=2", "warmup=0", *extra]
    monkeypatch.setattr(sys, "argv", argv)
    try:
        app()
    finally:
        GlobalHydra.instance().clear()


def completed(out: Path) -> list:
    (study,) = load_studies(out / "front")
    return study.trials


@pytest.mark.slow  # five searches (Hydra start-up each): about 25 s on an idle 2-core machine
def test_search_writes_sqlite_runs_and_resumes(monkeypatch, llada_overrides, tmp_path):
    out = tmp_path / "a"
    search(monkeypatch, llada_overrides, out, "hydra.sweeper.n_trials=2")
    assert (out / "front" / "search.db").is_file()
    first = completed(out)
    assert [t["number"] for t in first] == [0, 1]
    with open(out / "front" / "runs.csv", newline="") as f:
        rows = {r["run_id"]: r for r in csv.DictReader(f)}
    for trial in first:  # each trial is an ordinary run: its row, its folder, the values it returned
        row = rows[trial["run_id"]]
        assert float(row["rule.delta"]) == trial["params"]["rule.delta"]
        assert trial["values"] == [float(row["accuracy"]), float(row["nfe_mean"])]
        assert (out / "front" / trial["run_id"] / "samples.jsonl").is_file()
    sessions = {t["run_id"]: len(json.loads((out / "front" / t["run_id"] / "run.json").read_text())["sessions"])
                for t in first}

    search(monkeypatch, llada_overrides, out, "hydra.sweeper.n_trials=2")  # budget reached: nothing runs
    assert completed(out) == first
    search(monkeypatch, llada_overrides, out, "hydra.sweeper.n_trials=3")  # raised budget: one more trial
    resumed = completed(out)
    assert resumed[:2] == first and len(resumed) == 3
    assert {t["run_id"]: len(json.loads((out / "front" / t["run_id"] / "run.json").read_text())["sessions"])
            for t in first} == sessions  # the finished runs were not run again

    search(monkeypatch, llada_overrides, tmp_path / "b", "hydra.sweeper.n_trials=3")  # the same search in one go
    assert [t["params"] for t in completed(tmp_path / "b")] == [t["params"] for t in resumed]

    paths = write_report(out / "front")
    assert {p.name for p in paths} >= {"frontier.md", "frontier.png", "frontier_summary.csv"}
    assert "| frechet | search | 3 |" in (out / "front" / "frontier.md").read_text()


@pytest.mark.slow  # two searches
def test_an_interrupted_trial_runs_again_with_its_parameters(monkeypatch, llada_overrides, tmp_path):
    out = tmp_path / "a"
    search(monkeypatch, llada_overrides, out, "hydra.sweeper.n_trials=1")
    url = f"sqlite:///{out / 'front' / 'search.db'}"
    (summary,) = optuna.get_all_study_summaries(storage=url)
    study = optuna.load_study(study_name=summary.study_name, storage=url)
    killed = study.ask()  # what a search killed mid-run leaves: a running trial with its parameters
    killed.suggest_float("rule.delta", 0.0, 0.9)
    delta = killed.params["rule.delta"]
    search(monkeypatch, llada_overrides, out, "hydra.sweeper.n_trials=2")
    study = optuna.load_study(study_name=summary.study_name, storage=url)  # not this process's cached copy
    states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
    assert states[killed.number] == TrialState.FAIL
    done = completed(out)
    assert len(done) == 2 and done[1]["params"]["rule.delta"] == delta


@pytest.mark.slow  # three runs
def test_grid_runs_the_even_grid_of_the_same_space(monkeypatch, llada_overrides, tmp_path):
    search(monkeypatch, llada_overrides, tmp_path, "hydra.sweeper.n_trials=3", "hydra.sweeper.grid=true")
    (study,) = load_studies(tmp_path / "front")
    assert study.kind == "grid" and study.search == "frechet"
    assert [t["params"]["rule.delta"] for t in study.trials] == [0.0, 0.45, 0.9]


def test_bad_objective_is_one_line_and_exit_2(run_cli, llada_overrides):
    status, err = run_cli("hparams_search=frechet", *llada_overrides, "hydra.sweeper.objectives=[accuracy,nfe]")
    assert status == 2
    assert err[-1].startswith("dllm-bench: ") and "'nfe' is not allowed; allowed: accuracy, nfe_mean" in err[-1]


def test_grid_points_and_levels():
    space, fixed = parse_space(["rule.threshold=interval(0.5, 1.0)", "limit=3"])
    assert fixed == {"limit": "3"} and list(space) == ["rule.threshold"]
    assert grid_points(space, 3) == [{"rule.threshold": 0.5}, {"rule.threshold": 0.75}, {"rule.threshold": 1.0}]
    space, _ = parse_space(["policy.explore_steps=int(interval(1, 8))", "policy.converge_threshold=interval(0.1, 0.9)"])
    assert levels(space["policy.explore_steps"], 3) == [1, 5, 8]  # integers stay integers
    grid = grid_points(space, 10)  # two parameters: 3 levels each, 9 <= 10 points
    assert len(grid) == 9 and {p["policy.converge_threshold"] for p in grid} == {0.1, 0.5, 0.9}


@pytest.mark.parametrize("search_file", sorted(p.stem for p in (CONF_DIR / "hparams_search").glob("*.yaml")))
def test_every_search_config_searches_keys_of_its_run(compose_cfg, search_file):
    """A search's `params` name keys the composed run config has (a renamed rule key fails here, not mid-search)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"hparams_search={search_file}"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert params, f"{search_file}: no searched parameter"
    for dotted in params:
        group, _, key = dotted.rpartition(".")
        node = cfg[group] if group else cfg
        assert key in node, f"{search_file}: {dotted} is not a key of {group or 'the top level'}"
    assert cfg.hydra.sweeper._target_.endswith("FrontierSweeper")
    assert list(cfg.hydra.sweeper.objectives) == ["accuracy", "nfe_mean"]
    space, _ = parse_space([f"{k}={v}" for k, v in params.items()])
    assert sorted(space) == sorted(params)  # every entry is a searched range, not a fixed value
    cfg = compose_cfg(f"hparams_search={search_file}")
    validate_config(cfg)  # the run it searches from is one the runner accepts (rule x cache x policy)


def _searches() -> dict[str, dict]:
    import yaml

    return {p.stem: yaml.safe_load(p.read_text()) for p in (CONF_DIR / "hparams_search").glob("*.yaml")}


def _numeric_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if any(t in str(f.type).split(" | ") for t in ("int", "float"))}


def _overrides(data: dict) -> dict[str, str]:
    return {k.split("/")[-1]: v for d in data["defaults"] if isinstance(d, dict) for k, v in d.items()}


def test_every_adaptive_rule_and_cache_knob_has_a_search():
    """From the registries: each adaptive rule with numeric parameters has conf/hparams_search/<rule>.yaml searching
    all of them; each cache with numeric knobs has cache_<name>.yaml searching some of them."""
    searches = _searches()
    rules = {n: c for n, c in RULES.items() if c.adaptive and _numeric_fields(c)}
    assert {"threshold", "frechet", "credit", "klass"} <= set(rules)
    for name, cls in rules.items():
        assert name in searches, f"rule {name!r} has no conf/hparams_search/{name}.yaml"
        assert _overrides(searches[name])["rule"] == name
        assert {f"rule.{k}" for k in _numeric_fields(cls)} <= set(searches[name]["hydra"]["sweeper"]["params"])
    caches = {n: c for n, c in CACHES.items() if _numeric_fields(c)}
    assert {"dual", "dkv", "d2cache"} <= set(caches)
    for name, cls in caches.items():
        search = searches.get(f"cache_{name}")
        assert search is not None, f"cache {name!r} has no conf/hparams_search/cache_{name}.yaml"
        assert _overrides(search)["cache"] == name
        searched = {k.split(".", 1)[1] for k in search["hydra"]["sweeper"]["params"] if k.startswith("cache.")}
        assert searched and searched <= _numeric_fields(cls)
    assert "block_length" in searches["blocks"]["hydra"]["sweeper"]["params"]


def frontier_script():
    spec = importlib.util.spec_from_file_location("frontier_script", CONF_DIR.parent / "scripts" / "frontier.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv,message", [
    (["--rule", "bogus"], "frontier: hparams_search 'bogus' is not allowed; allowed: "
                          + ", ".join(sorted(p.stem for p in (CONF_DIR / "hparams_search").glob("*.yaml")))),
    (["--rule", "frechet", "--task", "sudok"], "frontier: task 'sudok' is not allowed; allowed: "),
    (["--rule", "frechet", "--limit", "0"], "frontier: --limit 0 and --trials None must be >= 1"),
])
def test_make_frontier_refuses_bad_input_before_running(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        frontier_script().parse_args(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().startswith(message)


def test_make_frontier_search_command():
    module = frontier_script()
    cmd = module.search_command(module.parse_args(["--rule", "threshold", "--trials", "5", "batch_size=50"]), True)
    assert cmd[1:] == ["-m", "dllm_bench.run", "hparams_search=threshold", "task=sudoku", "model=tiny_llada",
                       "output_dir=results/frontier_local", "name=tiny_llada_sudoku", "limit=200", "progress=false",
                       "batch_size=50", "hydra.sweeper.n_trials=5", "hydra.sweeper.grid=true"]
