"""`dllm-bench --multirun`: after each job, its result, the jobs left and their ETA (a Hydra callback,
conf/config.yaml `hydra.callbacks`).

The count comes from the sweep's own overrides (`cache=none,prefix,dual` is three jobs) for Hydra's basic sweeper;
a search (the frontier sweeper) counts its `n_trials`. Jobs of a parallel launcher (joblib, SLURM) run in other
processes, where one process cannot count them: there the callback stays silent.
"""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from dllm_bench.runner.progress import CellProgress

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def sweep_size(config: DictConfig) -> tuple[int | None, set[str]]:
    """(jobs of a multirun, the keys it sweeps): the basic sweeper's product of its swept overrides, a search's
    n_trials (its keys unknown here: every override is shown), else (None, {})."""
    sweeper = config.hydra.sweeper
    if sweeper.get("_target_") == BASIC_SWEEPER:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
        parsed = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
        swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
        return sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None)), swept
    trials = sweeper.get("n_trials")
    return (int(trials) if isinstance(trials, int) else None), set()


class SweepProgress(Callback):
    """Prints `[k/N] <the job's overrides>: <its result> in <time>; <left>, ETA <time>` after each job."""

    def __init__(self) -> None:
        self.progress: CellProgress | None = None
        self.swept: set[str] = set()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.hydra.launcher.get("_target_") != BASIC_LAUNCHER:
            return
        size, self.swept = sweep_size(config)
        if size:
            self.progress = CellProgress()
            self.progress.plan("sweep", size)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.progress is not None:
            self.progress.start()

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if self.progress is None:
            return
        row = getattr(job_return, "_return_value", None)
        outcome = None
        if isinstance(row, dict) and "accuracy" in row:
            outcome = (f"accuracy {row['accuracy']:.4f} n={row['n_samples']} NFE {row['nfe_mean']:.2f} "
                       f"tok/s {row['tokens_per_s']:.1f}")
        overrides = list(getattr(job_return, "overrides", None) or [])
        shown = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in self.swept] or overrides
        label = " ".join(shown) or "job"
        print(self.progress.finish(label, outcome), flush=True)
