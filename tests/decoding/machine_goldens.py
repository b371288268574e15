"""Goldens that hold bit for bit on the machine that recorded them, and away from near-ties elsewhere.

A fixture stores the fingerprint of the machine its published run used (:func:`fingerprint`: CPU model, torch
version, ATen CPU capability). Where the running machine has the same fingerprint every decode must agree; elsewhere
only decodes whose every commit decision has a margin of at least ``NEAR_TIE`` in the step's confidences
(:func:`decision_margin`) must (another math library may round a near-tie the other way, in the published code as
in ours).
"""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from dllm_bench.decoding.accounting import StepTrace

NEAR_TIE = 1e-4


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def fingerprint() -> dict[str, str]:
    """What decides the last bits of a CPU decode: CPU model, torch version, ATen CPU capability."""
    return {"cpu": cpu_model(), "torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability()}


def same_machine(recorded: dict[str, str]) -> bool:
    return recorded == fingerprint()


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
