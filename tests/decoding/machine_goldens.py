"""Goldens that hold bit for bit on the machine that recorded them, and away from near-ties elsewhere.

A fixture's recording machine and kernel widths are in tests/fixtures/recorded_on.json (tests/machine.py). Where
this process runs there every decode must agree; elsewhere only decodes whose every commit decision has a margin of
at least ``NEAR_TIE`` in the step's confidences (in log-odds where they are probabilities)
(:func:`decision_margin`) must (another math library may round a near-tie the other way, in the published code as
in ours).
"""

from __future__ import annotations

import math

from dllm_bench.decoding.accounting import StepTrace
from tests.machine import recording

NEAR_TIE = 1e-4


def same_machine(fixture: str) -> bool:
    """Whether this process runs where ``fixture`` was recorded (tests/fixtures/recorded_on.json, tests/machine.py)."""
    return recording(fixture).here()


def log_odds(p: float) -> float:
    """``log(p / (1 - p))``: the scale on which a probability's rounding error stays the size of the logits' own
    (near 1 two confidences 1e-10 apart can be 0.05 apart here, which no math library's rounding bridges)."""
    if p >= 1.0:
        return math.inf
    if p <= 0.0:
        return -math.inf
    return math.log(p) - math.log1p(-p)


def decision_margin(trace: list[StepTrace], threshold: float | None = None, *, probabilities: bool = False) -> float:
    """The smallest gap, over a decode's steps, between the last committed and the first uncommitted candidate
    confidence, and (with a threshold rule) between any candidate confidence and the threshold; with
    ``probabilities`` the gaps are measured in log-odds (:func:`log_odds`)."""
    scale = log_odds if probabilities else float
    margin = float("inf")
    for step in trace:
        conf, k = [scale(c) for c in step.sorted_confidences], step.n_committed
        if 0 < k < len(conf):
            margin = min(margin, _gap(conf[k - 1], conf[k]))
        if threshold is not None and conf:
            limit = scale(threshold)
            margin = min(margin, min(_gap(c, limit) for c in conf))
    return margin


def _gap(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b)
