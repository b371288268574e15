"""`hydra/sweeper=frontier_optuna`: Hydra's Optuna sweeper config plus `objectives` and `grid`, run by
dllm_bench.search.sweep (a resumable, budgeted study whose trials are ordinary dllm-bench runs)."""

# no `from __future__ import annotations`: Hydra's plugin scan runs this module outside sys.modules, where a
# dataclass cannot resolve string annotations, and OmegaConf needs the real types of the structured config
import logging
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf
from omegaconf import DictConfig

# Hydra imports Optuna (and its SQL migration tool) before the sweep starts: their set-up would log every step
logging.getLogger("alembic").setLevel(logging.WARNING)


@dataclass
class FrontierSweeperConf(OptunaSweeperConf):
    _target_: str = "hydra_plugins.dllm_bench_frontier.frontier_sweeper.FrontierSweeper"
    # runs.csv columns each trial's run returns, one per entry of `direction`
    objectives: list[str] = field(default_factory=lambda: ["accuracy", "nfe_mean"])
    # true: the even grid of the same space (n_trials points at most) instead of the sampler
    grid: bool = False


ConfigStore.instance().store(group="hydra/sweeper", name="frontier_optuna", node=FrontierSweeperConf,
                             provider="dllm_bench")


class FrontierSweeper(Sweeper):
    """Hands the sweep to `dllm_bench.search.sweep.FrontierSearch` once Hydra has set up the launcher."""

    def __init__(self, sampler: Any, direction: Any, storage: Any, study_name: str | None, n_trials: int,
                 n_jobs: int, max_failure_rate: float, search_space: Any, custom_search_space: str | None,
                 params: DictConfig | None, objectives: list[str], grid: bool) -> None:
        if search_space or custom_search_space:
            raise ValueError("hydra.sweeper.search_space and custom_search_space are not supported by the frontier "
                             "sweeper; give the searched keys in hydra.sweeper.params")
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
