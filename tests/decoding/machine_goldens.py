"""Goldens that hold bit for bit on the machine that recorded them, and away from near-ties elsewhere.

A fixture's recording machine and kernel widths are in tests/fixtures/recorded_on.json (tests/machine.py). Where
this process runs there every decode must agree; elsewhere only decodes whose every commit decision has a margin of at least ``NEAR_TIE`` in the step's confidences
(:func:`decision_margin`) must (another math library may round a near-tie the other way, in the published code as
in ours).
"""

from __future__ import annotations

from dllm_bench.decoding.accounting import StepTrace
from tests.machine import recording

NEAR_TIE = 1e-4


def same_machine(fixture: str) -> bool:
    """Whether this process runs where ``fixture`` was recorded (tests/fixtures/recorded_on.json, tests/machine.py)."""
    return recording(fixture).here()


def decision_margin(trace: list[StepTrace], threshold: float | None = None) -> float:
    """The smallest gap, over a decode's steps, between the last committed and the first uncommitted candidate
    confidence, and (with a threshold rule) between any candidate confidence and the threshold."""
    margin = float("inf")
    for step in trace:
        conf, k = step.sorted_confidences, step.n_committed
        if 0 < k < len(conf):
            margin = min(margin, conf[k - 1] - conf[k])
        if threshold is not None and conf:
            margin = min(margin, min(abs(c - threshold) for c in conf))
    return margin
