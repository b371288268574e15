"""The searched parameters: Optuna distributions from Hydra's sweep syntax (parsed by Hydra's own override parser),
suggested through Optuna's public calls, and the even grid of the same space that the searched front is compared
with.

Syntax (the values of ``hydra.sweeper.params`` or sweep overrides): ``interval(a, b)`` a float in [a, b];
``int(interval(a, b))`` an integer in [a, b]; ``tag(log, interval(a, b))`` on a log scale; ``range(a, b, s)`` the
values a, a+s, ... below b (Hydra's range: b excluded); ``x,y,z`` or ``choice(x, y, z)`` one of the listed values.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import Trial


def _is_int(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def distribution(override: Override) -> BaseDistribution:
    """One sweep override as an Optuna distribution (a ValueError names the key and what is allowed)."""
    value, key = override.value(), override.get_key_element()
    if isinstance(value, ChoiceSweep) or (isinstance(value, RangeSweep) and value.shuffle):
        return CategoricalDistribution(list(override.sweep_iterator(transformer=Transformer.encode)))
    if isinstance(value, RangeSweep):
        values = list(override.sweep_iterator())
        if not values:
            raise ValueError(f"{key}: {override.get_value_element_as_str()} is empty")
        if _is_int(value.start, value.stop, value.step):
            return IntDistribution(int(values[0]), int(values[-1]), step=int(value.step))
        return FloatDistribution(float(values[0]), float(values[-1]), step=float(value.step))
    if isinstance(value, IntervalSweep):
        log = "log" in value.tags
        if _is_int(value.start, value.end):
            return IntDistribution(int(value.start), int(value.end), log=log)
        return FloatDistribution(float(value.start), float(value.end), log=log)
    raise ValueError(f"{key}: {override.get_value_element_as_str()} is not a searchable sweep; use interval(a, b), "
                     "int(interval(a, b)), range(a, b, step) or a list of choices")


def parse_space(overrides: list[str]) -> tuple[dict[str, BaseDistribution], dict[str, str]]:
    """`key=interval(a,b)` / `key=range(...)` / `key=a,b,c` -> (searched distributions, fixed `key=value` strings)."""
    space: dict[str, BaseDistribution] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.get_key_element()
        if override.is_sweep_override():
            space[key] = distribution(override)
            fixed.pop(key, None)
        else:
            fixed[key] = override.get_value_element_as_str()
            space.pop(key, None)
    return space, fixed


def suggest(trial: Trial, name: str, dist: BaseDistribution) -> Any:
    """One parameter of a trial, through the public `suggest_*` call that matches its distribution."""
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    raise ValueError(f"search parameter {name!r}: distribution {type(dist).__name__} is not supported")


def levels(dist: BaseDistribution, k: int) -> list[Any]:
    """`k` evenly spaced values of one parameter, ends included (geometric on a log scale; integers and stepped
    floats on their step, deduplicated; every choice of a categorical)."""
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    low, high = float(dist.low), float(dist.high)
    values = np.geomspace(low, high, k) if dist.log else np.linspace(low, high, k)
    step = dist.step
    if isinstance(dist, IntDistribution):
        return sorted({int(dist.low + step * round((v - dist.low) / step)) for v in values})
    if step is not None:
        return sorted({round(dist.low + step * round((v - dist.low) / step), 12) for v in values})
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


def space_text(dist: BaseDistribution) -> str:
    """A distribution as the study digest names it: a fixed text of kind, ends, step and scale (not Optuna's repr,
    which changes between releases, so a study's name does not)."""
    if isinstance(dist, CategoricalDistribution):
        return f"CategoricalDistribution(choices={tuple(dist.choices)!r})"
    if isinstance(dist, IntDistribution):
        kind = "IntLogUniformDistribution" if dist.log else "IntUniformDistribution"
        return f"{kind}(high={dist.high}, low={dist.low}, step={dist.step})"
    if dist.log:
        return f"LogUniformDistribution(high={dist.high}, low={dist.low})"
    if dist.step is not None:
        return f"DiscreteUniformDistribution(high={dist.high}, low={dist.low}, q={dist.step})"
    return f"UniformDistribution(high={dist.high}, low={dist.low})"
