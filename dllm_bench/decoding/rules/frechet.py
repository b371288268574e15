"""Fast-dLLM++'s Fréchet profile rule: the largest prefix with L_n - U_n > delta."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.rules.base import RuleBase, StepContext, register
from dllm_bench.decoding.selectors import frechet_commit_mask


@register
@dataclass(frozen=True)
class FrechetSelector(RuleBase):
    """Fast-dLLM++ Fréchet profile rule: largest prefix with L_n - U_n > delta (traces record its gap)."""

    delta: float = 0.25
    name: ClassVar[str] = "frechet"

    def check(self) -> None:
        if not 0 <= self.delta < 1:
            raise ValueError(f"frechet delta must be in [0, 1), got {self.delta}")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        return frechet_commit_mask(ctx.confidence, ctx.candidates, self.delta)
