"""What each numeric key means, declared beside the key: its lowest and highest value, and every number finite.

A settings field carries its bounds as dataclass metadata (`field(default=..., metadata=bounds(1))`); the
validator reads them (`out_of_bounds`), so adding a key adds its range in one place. A NaN or an infinity is no
key's meaning: `non_finite` finds one anywhere in a config.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any

from dllm_bench.runner.environment import cpu_count

Limit = float | Callable[[], int] | None  # a fixed bound, or one read from the machine when the check runs


@dataclass(frozen=True)
class Bounds:
    """The allowed range of a numeric key: `low <= value <= high` (None: unbounded on that side); `high_means`
    says what a bound read from the machine is (e.g. "the CPUs this process may use")."""

    low: float | None = None
    high: Limit = None
    high_means: str = ""

    def allowed(self, kind: str) -> str:
        """`an integer >= 1`, `a number in [0, 1]`, `an integer in [1, 2] (the CPUs this process may use)`."""
        high = self.high() if callable(self.high) else self.high
        why = f" ({self.high_means})" if self.high_means else ""
        if self.low is not None and high is not None:
            return f"{kind} in [{_show(self.low)}, {_show(high)}]{why}"
        if self.low is not None:
            return f"{kind} >= {_show(self.low)}"
        if high is not None:
            return f"{kind} <= {_show(high)}{why}"
        return kind

    def contains(self, value: float) -> bool:
        high = self.high() if callable(self.high) else self.high
        return (self.low is None or value >= self.low) and (high is None or value <= high)


def _show(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def bounds(low: float | None = None, high: Limit = None, high_means: str = "") -> dict[str, Bounds]:
    """Field metadata declaring a numeric key's range."""
    return {"bounds": Bounds(low, high, high_means)}


def field_bounds(cls: type) -> dict[str, Bounds]:
    """The declared bounds of a settings dataclass's fields, by field name."""
    return {f.name: f.metadata["bounds"] for f in fields(cls) if "bounds" in f.metadata}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def out_of_bounds(value: Any, rule: Bounds, integer: bool) -> str | None:
    """What is allowed when `value` (a number; None and other types are judged elsewhere) breaks `rule`."""
    if not is_number(value) or rule.contains(value):
        return None
    return rule.allowed("an integer" if integer else "a number")


def non_finite(tree: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """(dotted key, value) of every NaN or infinite number in a nested config, in key order."""
    if isinstance(tree, dict):
        for key in sorted(tree, key=str):
            yield from non_finite(tree[key], f"{prefix}{key}.")
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            yield from non_finite(item, f"{prefix}{i}.")
    elif isinstance(tree, float) and not math.isfinite(tree):
        yield prefix.rstrip("."), tree


# Ranges of decoding parameters that the engine's builders do not check yet. They belong on the decoding
# dataclasses' fields (dllm_bench/decoding/, under refactoring); until they move there the runner holds them:
# (group, option's class name) -> key -> bounds.
DECODING_BOUNDS: dict[tuple[str, str], dict[str, Bounds]] = {
    ("policy", "SlowFastPolicy"): {
        "stability_threshold": Bounds(0.0),  # a variance of the span-end estimates
        "explore_threshold": Bounds(0.0, 1.0),  # a probability
        "min_parallel": Bounds(1.0),  # tokens that must qualify for a parallel commit
    },
}


def usable_cpus() -> int:
    """The CPUs this process may run on (the affinity mask): a thread count above it only queues threads."""
    return cpu_count()
