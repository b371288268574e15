"""Fast-dLLM's factor rule: the largest n with (n+1)(1 - c(n)) < f."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import factor_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


@register
@dataclass(frozen=True)
class FactorRule(RuleBase):
    """Fast-dLLM factor: largest n with (n+1)(1 - c(n)) < f; ``compat`` = the published loop.

    f = 0.75 is Fast-dLLM++'s stated default (section 5; its Tables 1, 2 and 4); its Table 5 runs f = 1.0.
    """

    f: float = 0.75
    compat: bool = False
    name: ClassVar[str] = "factor"

    def check(self) -> None:
        if not self.f > 0:
            raise ValueError(f"factor f must be > 0, got {self.f}")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        return factor_commit_mask(ctx.confidence, ctx.candidates, self.f, self.compat)
