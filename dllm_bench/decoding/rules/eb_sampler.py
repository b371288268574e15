"""EB-Sampler (entropy-bounded unmasking): commit the lowest-entropy candidates while their summed entropy,
less its largest term, stays within entropy_budget.

Reference code: NEUIR/PC-Sampler ``src/generate.py`` ``generate_with_eb_sampler`` (entropy in nats, error
proxy = entropy, no blocks: every masked position of the answer is a candidate). Ranked by entropy ascending
(ties: lower position first), the count is #{n : sum_{j<=n} H(j) - max_{j<=n} H(j) <= entropy_budget}, at least one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import prefix_commit_mask, sort_candidates
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


def eb_count_sorted(sorted_neg_entropy: torch.Tensor, n_cand: torch.Tensor, entropy_budget: float) -> torch.Tensor:
    """EB-Sampler count from negative entropies sorted descending ([B, L]; values past n_cand ignored)."""
    entropy = -sorted_neg_entropy
    bound = entropy.cumsum(dim=-1) - entropy.cummax(dim=-1).values
    ranks = torch.arange(entropy.shape[-1], device=entropy.device)
    passing = ((bound <= entropy_budget) & (ranks < n_cand.unsqueeze(1))).sum(dim=-1)
    return torch.where(n_cand > 0, passing.clamp(min=1), passing).minimum(n_cand)


@register
@dataclass(frozen=True)
class EBSampler(RuleBase):
    """EB-Sampler with error bound ``entropy_budget`` (nats; the paper's gamma). Defaults: 0.01, the value of every
    PC-Sampler script
    (``scripts/eval_eb_sampler.sh``; the function's own default is 0.1, d2Cache's config 0.001)."""

    entropy_budget: float = 0.01
    name: ClassVar[str] = "eb_sampler"
    measure_overridable: ClassVar[bool] = False

    @property
    def measure(self) -> str:
        return "neg_entropy"

    def check(self) -> None:
        if not self.entropy_budget >= 0:
            raise ValueError(f"eb_sampler entropy_budget must be >= 0 (nats), got {self.entropy_budget}")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        sorted_conf, order, n_cand = sort_candidates(ctx.confidence, ctx.candidates)
        return prefix_commit_mask(order, eb_count_sorted(sorted_conf, n_cand, self.entropy_budget))
