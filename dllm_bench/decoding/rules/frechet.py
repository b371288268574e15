"""Fast-dLLM++'s Fréchet profile rule: the largest prefix with L_n - U_n > delta."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import frechet_commit_mask, frechet_gap_sorted
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


@register
@dataclass(frozen=True)
class FrechetRule(RuleBase):
    """Fast-dLLM++ Fréchet profile rule: largest prefix with L_n - U_n > delta (traces record its gap)."""

    delta: float = 0.25
    name: ClassVar[str] = "frechet"

    def check(self) -> None:
        if not 0 <= self.delta < 1:
            raise ValueError(f"frechet delta must be in [0, 1), got {self.delta}")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        return frechet_commit_mask(ctx.confidence, ctx.candidates, self.delta)

    def trace_terms(self, sorted_confidences: torch.Tensor, n_committed: torch.Tensor) -> dict[str, torch.Tensor]:
        """The Fréchet gap at the committed count split into its factor core and heterogeneity bonus."""
        gap, core = frechet_gap_sorted(sorted_confidences.to(torch.float64))
        at = (n_committed - 1).clamp(min=0).unsqueeze(1)
        core_n, gap_n = core.gather(1, at).squeeze(1), gap.gather(1, at).squeeze(1)
        return {"frechet_core": core_n, "frechet_bonus": gap_n - core_n}
