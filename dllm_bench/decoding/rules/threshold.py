"""Fast-dLLM's threshold rule: every candidate with confidence >= threshold, at least the most confident one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import threshold_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


@register
@dataclass(frozen=True)
class ThresholdRule(RuleBase):
    """Fast-dLLM threshold: every candidate with confidence >= threshold (at least one)."""

    threshold: float = 0.9
    name: ClassVar[str] = "threshold"

    def check(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold threshold must be in (0, 1], got {self.threshold}")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        return threshold_commit_mask(ctx.confidence, ctx.candidates, self.threshold)
