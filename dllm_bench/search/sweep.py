"""The search loop behind `hydra/sweeper=frontier`: an Optuna study in SQLite, each trial one ordinary run, run by
Optuna's own ask/tell calls (no Hydra sweeper plugin of Optuna's).

How it differs from a plain `study.optimize` loop (the `params` syntax is Hydra's sweep syntax, search/space.py):
- `n_trials` is the study's budget of completed trials, not the number to add: rerunning a finished search
  runs nothing, raising `n_trials` continues it;
- a trial left running by a killed search is closed as failed and its parameters are queued first, so its run
  (same parameters, same run id) resumes its own samples;
- the sampler is built afresh for each trial with seed `seed + completed trials`, so a search interrupted and
  resumed proposes what an uninterrupted one would have (given the same completed trials);
- `objectives` names the runs.csv columns the run returns, so the task function returns its ordinary row;
- `grid: true` runs the even grid of the same space (`space.grid_points`) in place of the sampler.
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dllm_bench.runner.validate import ConfigError
from dllm_bench.search.space import grid_points, parse_space, space_text, suggest

log = logging.getLogger("dllm_bench.search")

# runs.csv summary columns a search may optimise, with the direction that improves each
OBJECTIVES = {"accuracy": "maximize", "nfe_mean": "minimize", "steps_mean": "minimize",
              "tokens_per_forward": "maximize", "tokens_per_s": "maximize", "latency_s_mean": "minimize"}
# top-level keys that change neither a trial's outputs nor its objective values: left out of the study's digest
NOT_IN_DIGEST = ("hydra", "name", "output_dir", "progress", "trace", "warmup", "timing_docs", "resume_changed", "tracking")


def direction_names(direction: Any) -> list[str]:
    """`hydra.sweeper.direction` (one name or a list) as names."""
    items = direction if isinstance(direction, Sequence) and not isinstance(direction, str) else [direction]
    return [getattr(d, "name", str(d)) for d in items]


def check_objectives(objectives: list[str], directions: list[str]) -> None:
    """One known runs.csv column per direction, each pointing the way that improves it."""
    if not objectives:
        raise ConfigError(f"hydra.sweeper.objectives is empty; allowed: {', '.join(OBJECTIVES)}")
    for name in objectives:
        if name not in OBJECTIVES:
            raise ConfigError(f"hydra.sweeper.objectives: {name!r} is not allowed; allowed: {', '.join(OBJECTIVES)}")
    if len(directions) != len(objectives):
        raise ConfigError(f"hydra.sweeper.direction={directions} is not allowed: give one direction per objective "
                          f"({objectives})")
    for name, way in zip(objectives, directions):
        if way != OBJECTIVES[name]:
            raise ConfigError(f"hydra.sweeper.direction: {way!r} for {name!r} is not allowed: {name} is "
                              f"{OBJECTIVES[name]}d")


def sqlite_storage(storage: str | None) -> str:
    """The study's storage URL; an `sqlite:///path` gets its folder made (SQLite makes the file, not the folder)."""
    if not storage or not str(storage).startswith("sqlite:///"):
        raise ConfigError(f"hydra.sweeper.storage={storage!r} is not allowed: use sqlite:///<path> (a resumable file)")
    Path(str(storage)[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    return str(storage)


def study_digest(config: DictConfig, searched: list[str], extra: dict[str, Any]) -> str:
    """12 hex chars of everything that fixes a trial's outcome except the searched keys: the resolved run config
    (limit and offset included: they change the objectives), the checkpoint's fingerprint, and `extra`
    (space, objectives, directions, sampler, grid). Two searches share a study only when this matches; paths
    into the package count as `<dllm_bench>/...`, so a clone at another path finds the same study."""
    from dllm_bench.models.loading import checkpoint_fingerprint
    from dllm_bench.runner.config import PACKAGE_DIR, PACKAGE_MARK

    # key by key: resolving the whole config would resolve the hydra node's per-job keys, unset in the sweeper
    data = {key: OmegaConf.to_container(config[key], resolve=True) if OmegaConf.is_config(config[key])
            else config[key] for key in config if key != "hydra"}
    for key in NOT_IN_DIGEST:
        data.pop(key, None)
    for dotted in searched:
        node, *path = dotted.split(".")
        parent = data
        for part in [node, *path][:-1]:
            parent = parent.get(part, {}) if isinstance(parent, dict) else {}
        if isinstance(parent, dict):
            parent.pop(dotted.split(".")[-1], None)
    model = data.get("model") or {}
    model["fingerprint"] = checkpoint_fingerprint(str(model.get("name_or_path")))
    blob = json.dumps({"config": data, **extra}, sort_keys=True, default=str).replace(str(PACKAGE_DIR), PACKAGE_MARK)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def objective_values(row: Any, objectives: list[str]) -> list[float]:
    """The objectives from a run's returned runs.csv row."""
    if not isinstance(row, dict) or any(name not in row for name in objectives):
        raise RuntimeError(f"a search trial must return its runs.csv row with {objectives}; got {row!r:.200}")
    return [float(row[name]) for name in objectives]


class FrontierSearch:
    """One `--multirun` of a search: the study, its budget, and the loop that launches trials as Hydra jobs."""

    def __init__(self, *, sampler: Any, direction: Any, storage: str | None, study_name: str | None, n_trials: int,
                 n_jobs: int, max_failure_rate: float, params: DictConfig | None, objectives: list[str],
                 grid: bool, config: DictConfig, launcher: Any) -> None:
        self.sampler = sampler
        self.directions = direction_names(direction)
        self.objectives = list(objectives)
        check_objectives(self.objectives, self.directions)
        if n_trials < 1 or n_jobs < 1:
            raise ConfigError(f"hydra.sweeper.n_trials={n_trials}, n_jobs={n_jobs} are not allowed: both must be >= 1")
        self.storage = sqlite_storage(storage)
        self.study_name = study_name
        self.n_trials, self.n_jobs, self.max_failure_rate = int(n_trials), int(n_jobs), float(max_failure_rate)
        self.params = params
        self.grid = bool(grid)
        self.config = config
        self.launcher = launcher
        self.job_idx = 0

    def _sampler_for(self, completed: int) -> Any:
        """The sampler for the next trial: the configured one rebuilt with seed + completed trials (unseeded: as
        configured)."""
        import optuna
        from hydra.utils import instantiate

        if self.grid:
            return optuna.samplers.RandomSampler(seed=completed)  # never consulted: every grid trial is queued
        node = self.config.hydra.sweeper.sampler
        if node.get("seed") is None:
            return self.sampler
        return instantiate(node, seed=int(node.seed) + completed)

    def _label(self) -> str:
        choices = self.config.hydra.runtime.choices
        return str(choices.get("hparams_search") or choices.get("rule") or "search")

    def sweep(self, arguments: list[str]) -> None:
        import optuna
        from optuna.trial import TrialState

        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)  # the SQLite schema set-up logs every step
        overrides = [f"{k}={v}" for k, v in (self.params or {}).items()] + list(arguments)
        space, fixed = parse_space(overrides)
        if not space:
            raise ConfigError("the search has no searched parameter: give hydra.sweeper.params (e.g. "
                              "rule.delta: interval(0.0, 0.9)) or a sweep override")
        sampler_node = OmegaConf.to_container(self.config.hydra.sweeper.sampler, resolve=True)
        # plain `key=value` arguments are in the config already (the digest covers them there)
        extra = {"space": {k: space_text(v) for k, v in sorted(space.items())}, "objectives": self.objectives, "directions": self.directions,
                 "sampler": "grid" if self.grid else sampler_node}
        label = self._label() + ("-grid" if self.grid else "")
        name = self.study_name or f"{label}-{study_digest(self.config, sorted(space), extra)}"
        study = optuna.create_study(study_name=name, storage=self.storage, directions=self.directions,
                                    sampler=self._sampler_for(0), load_if_exists=True)
        study.set_user_attr("search", self._label())
        study.set_user_attr("kind", "grid" if self.grid else "search")
        study.set_user_attr("objectives", self.objectives)
        study.set_user_attr("space", extra["space"])
        points = grid_points(space, self.n_trials) if self.grid else []
        budget = min(self.n_trials, len(points)) if self.grid else self.n_trials
        for stale in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            # left running by a killed search: closed, and its parameters queued so that its run resumes
            study.tell(stale.number, state=TrialState.FAIL)
            if set(stale.params) == set(space):
                study.enqueue_trial(dict(stale.params))
                log.info("trial %d was interrupted: its parameters run again first", stale.number)
        log.info("study %s in %s: %s over %s, budget %d completed trials", name, self.storage,
                 "grid" if self.grid else type(study.sampler).__name__, ", ".join(sorted(space)), budget)
        while True:
            completed = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
            if completed >= budget:
                break
            trials, jobs = [], []
            for j in range(min(self.n_jobs, budget - completed)):
                if self.grid and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                    study.enqueue_trial(points[completed + j])
                study.sampler = self._sampler_for(completed + j)
                trial = study.ask()
                params = {key: suggest(trial, key, dist) for key, dist in space.items()}
                trials.append(trial)
                jobs.append(tuple(f"{k}={v}" for k, v in {**params, **fixed}.items()))
            returns = self.launcher.launch(jobs, initial_job_idx=self.job_idx)
            self.job_idx += len(returns)
            failures = []
            for trial, ret in zip(trials, returns):
                try:
                    row = ret.return_value
                    values = objective_values(row, self.objectives)
                except Exception as err:  # the job's own exception, or a row without the objectives
                    study.tell(trial, state=TrialState.FAIL)
                    failures.append(err)
                    continue
                trial.set_user_attr("run_id", row["run_id"])
                trial.set_user_attr("n_samples", int(row["n_samples"]))
                study.tell(trial, values)
                log.info("trial %d (%d/%d): %s -> %s", trial.number, completed + len(trials), budget,
                         " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial.params.items()),
                         ", ".join(f"{o} {v:.4g}" for o, v in zip(self.objectives, values)))
            if failures and len(failures) / len(returns) > self.max_failure_rate:
                raise failures[0]
        front = study.best_trials
        log.info("study %s: %d completed trials, %d on the front", name, budget, len(front))
