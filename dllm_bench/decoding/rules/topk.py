"""LLaDA's fixed-step baseline: the policy's k most confident candidates per step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register

# remasking -> the confidence measure it ranks by
REMASKING = {"low_confidence": "top1_prob", "random": "random", "entropy": "neg_entropy"}


@register
@dataclass(frozen=True)
class TopKRule(RuleBase):
    """The schedule's k most confident candidates (LLaDA ``low_confidence``); ``remasking='random'`` ranks by
    U(0,1) draws instead (LLaDA ``random``), ``'entropy'`` by negative entropy (the ranking of Fast-dLLM's
    blocked Dream cache loop with ``alg=entropy``)."""

    remasking: str = "low_confidence"
    name: ClassVar[str] = "topk"
    adaptive: ClassVar[bool] = False

    @property
    def measure(self) -> str:
        return REMASKING[self.remasking]

    def check(self) -> None:
        if self.remasking not in REMASKING:
            raise ValueError(f"topk remasking {self.remasking!r} is not one of {', '.join(REMASKING)}")

    def check_combination(self, *, policy, cache, gen_length: int, block_length: int) -> None:
        if getattr(policy, "name", None) in ("blocks", "dpad") and policy.steps is None:
            raise ValueError(f"rule 'topk' needs a fixed-step schedule: policy {policy.name!r} with steps (an integer)")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        if ctx.quota is None:
            raise ValueError("the topk rule needs a fixed-step schedule (policy 'blocks' with steps)")
        return topk_commit_mask(ctx.confidence, ctx.candidates, ctx.quota)
