"""The searched parameters: Optuna distributions from Hydra's sweep syntax, suggested through Optuna's public calls,
and the even grid of the same space that the searched front is compared with."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    DiscreteUniformDistribution,
    IntLogUniformDistribution,
    IntUniformDistribution,
    LogUniformDistribution,
    UniformDistribution,
)
from optuna.trial import Trial


def parse_space(overrides: list[str]) -> tuple[dict[str, BaseDistribution], dict[str, str]]:
    """`key=interval(a,b)` / `key=range(...)` / `key=a,b,c` -> (searched distributions, fixed `key=value` strings),
    with the Optuna sweeper's own parser (the syntax of `hydra.sweeper.params`)."""
    from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

    space, fixed = create_params_from_overrides(overrides)
    return {k: v for k, v in space.items() if k not in fixed}, fixed


def suggest(trial: Trial, name: str, dist: BaseDistribution) -> Any:
    """One parameter of a trial, through the public `suggest_*` call that matches its distribution."""
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, IntLogUniformDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=True)
    if isinstance(dist, IntUniformDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step)
    if isinstance(dist, LogUniformDistribution):
        return trial.suggest_float(name, dist.low, dist.high, log=True)
    if isinstance(dist, DiscreteUniformDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.q)
    if isinstance(dist, UniformDistribution):
        return trial.suggest_float(name, dist.low, dist.high)
    raise ValueError(f"search parameter {name!r}: distribution {type(dist).__name__} is not supported")


def levels(dist: BaseDistribution, k: int) -> list[Any]:
    """`k` evenly spaced values of one parameter, ends included (geometric on a log scale; integers rounded and
    deduplicated; every choice of a categorical)."""
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    log = isinstance(dist, (LogUniformDistribution, IntLogUniformDistribution))
    low, high = float(dist.low), float(dist.high)
    values = np.geomspace(low, high, k) if log else np.linspace(low, high, k)
    if isinstance(dist, (IntUniformDistribution, IntLogUniformDistribution)):
        step = getattr(dist, "step", 1) or 1
        on_step = [int(dist.low + step * round((v - dist.low) / step)) for v in values]
        return sorted(set(on_step))
    if isinstance(dist, DiscreteUniformDistribution):
        return sorted({round(dist.low + dist.q * round((v - dist.low) / dist.q), 12) for v in values})
    return [round(float(v), 12) for v in values]


def grid_points(space: dict[str, BaseDistribution], budget: int) -> list[dict[str, Any]]:
    """An even grid over the searched space with at most `budget` points: one parameter gets `budget` levels;
    d parameters get floor(budget^(1/d)) levels each (at least 2), every combination, in a fixed order."""
    if not space:
        return []
    names = sorted(space)
    per_dim = budget if len(names) == 1 else max(2, math.floor(budget ** (1 / len(names)) + 1e-9))
    axes = [levels(space[name], per_dim) for name in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*axes)][:budget]
