"""The oracle floor: commit every candidate whose prediction already equals a reference decode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import oracle_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


@register
@dataclass(frozen=True)
class OracleRule(RuleBase):
    """Commit every candidate whose argmax equals the reference decode (needs ``reference=`` in generate);
    a row with no match commits its most confident candidate with the reference token."""

    name: ClassVar[str] = "oracle"

    def commit(self, ctx: StepContext) -> torch.Tensor:
        if ctx.reference is None:
            raise ValueError("the oracle rule needs reference tokens: generate(..., reference=[B, gen_length])")
        mask, _ = oracle_commit_mask(ctx.confidence, ctx.candidates, ctx.prediction, ctx.reference)
        return mask

    def tokens(self, ctx: StepContext) -> torch.Tensor:
        return ctx.reference
