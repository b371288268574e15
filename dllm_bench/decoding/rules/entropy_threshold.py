"""dParallel's entropy threshold: commit every candidate whose entropy is at most ``max_entropy``, always the
lowest-entropy one.

Published code: czg1225/dParallel ``LLaDA/generate.py`` ``get_transfer_index_entropy`` (entropy
-sum p log(p + 1e-12) in float64 over the whole vocabulary; the lowest is kept, every other one is dropped when
its entropy > threshold). Its knob is called ``threshold`` there; an entropy in nats, not a probability, it is
``max_entropy`` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import prefix_commit_mask, sort_candidates
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


@register
@dataclass(frozen=True)
class EntropyThreshold(RuleBase):
    """dParallel: candidates with entropy <= max_entropy (nats), at least the lowest. Default 0.5 (its LLaDA and
    Dream GSM8K, MATH and HumanEval runs); its MBPP runs use 0.45 (``rule.max_entropy=0.45``)."""

    max_entropy: float = 0.5
    name: ClassVar[str] = "entropy_threshold"
    measure_overridable: ClassVar[bool] = False

    @property
    def measure(self) -> str:
        return "neg_entropy"

    def check(self) -> None:
        if not self.max_entropy >= 0:
            raise ValueError(f"entropy_threshold max_entropy must be >= 0 (an entropy in nats), got {self.max_entropy}")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        _, order, n_cand = sort_candidates(ctx.confidence, ctx.candidates)
        passing = (ctx.candidates & (ctx.confidence >= -self.max_entropy)).sum(dim=-1)
        count = torch.where(n_cand > 0, passing.clamp(min=1), passing)
        return prefix_commit_mask(order, count)
