"""`hydra/sweeper=frontier_optuna`: the frontier search's settings, run by dllm_bench.search.sweep (a resumable,
budgeted Optuna study whose trials are ordinary dllm-bench runs). Optuna is driven directly: no Optuna sweeper
plugin, so any current Optuna works."""

# no `from __future__ import annotations`: Hydra's plugin scan runs this module outside sys.modules, where a
# dataclass cannot resolve string annotations, and OmegaConf needs the real types of the structured config (the
# typing module's: OmegaConf 2.3 reads neither `X | None` nor `dict[...]`)
# ruff: noqa: UP006, UP035, UP045
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

# Optuna's SQL migration tool logs every step of a new study's schema set-up
logging.getLogger("alembic").setLevel(logging.WARNING)


@dataclass
class FrontierSweeperConf:
    _target_: str = "hydra_plugins.dllm_bench_frontier.frontier_sweeper.FrontierSweeper"
    # an Optuna sampler (`_target_` and its arguments): conf/hydra/sweeper/sampler/ (optuna_tpe, optuna_random, optuna_nsgaii)
    sampler: Any = None
    # one per objective: maximize | minimize
    direction: Any = "minimize"
    # the study's storage: sqlite:///<path> (resumable)
    storage: Optional[str] = None
    # null = <search>-<digest of the settings that fix the outcome>
    study_name: Optional[str] = None
    # budget: completed trials in the study
    n_trials: int = 20
    # trials per batch handed to the launcher
    n_jobs: int = 1
    # a batch whose failed share exceeds this stops the search
    max_failure_rate: float = 0.0
    # searched keys in Hydra's sweep syntax (dllm_bench/search/space.py)
    params: Optional[Dict[str, str]] = None
    # runs.csv columns each trial's run returns, one per entry of `direction`
    objectives: List[str] = field(default_factory=lambda: ["accuracy", "nfe_mean"])
    # true: the even grid of the same space (n_trials points at most) instead of the sampler
    grid: bool = False


ConfigStore.instance().store(group="hydra/sweeper", name="frontier_optuna", node=FrontierSweeperConf,
                             provider="dllm_bench")


class FrontierSweeper(Sweeper):
    """Hands the sweep to `dllm_bench.search.sweep.FrontierSearch` once Hydra has set up the launcher."""

    def __init__(self, sampler: Any, direction: Any, storage: Any, study_name: Optional[str], n_trials: int,
                 n_jobs: int, max_failure_rate: float, params: Optional[DictConfig], objectives: list[str],
                 grid: bool) -> None:
        self.kwargs = {"sampler": sampler, "direction": direction, "storage": storage, "study_name": study_name,
                       "n_trials": n_trials, "n_jobs": n_jobs, "max_failure_rate": max_failure_rate,
                       "params": params, "objectives": list(objectives), "grid": grid}
        self.search = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from dllm_bench.search.sweep import FrontierSearch

        launcher = Plugins.instance().instantiate_launcher(config=config, hydra_context=hydra_context,
                                                           task_function=task_function)
        self.search = FrontierSearch(**self.kwargs, config=config, launcher=launcher)

    def sweep(self, arguments: list[str]) -> None:
        assert self.search is not None, "setup() runs before sweep()"
        return self.search.sweep(arguments)
