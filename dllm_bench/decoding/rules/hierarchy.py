"""dInfer's hierarchy decoder: per contiguous run of masked candidates its most confident one if above
``low_threshold``, plus every candidate above ``threshold``, plus the block's most confident one.

Published code: inclusionAI/dInfer ``python/dinfer/decoding/parallel_strategy.py`` ``HierarchyDecoder``
(strict ``>`` comparisons; every position tied with its run's maximum is taken).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


def run_maxima(confidence: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """[B, L] bool: candidates equal to the maximum of their contiguous run of candidates."""
    prev = torch.nn.functional.pad(candidates[:, :-1], (1, 0), value=False)
    starts = candidates & ~prev
    run = (starts.long().cumsum(dim=-1) - 1).clamp(min=0)
    floor = torch.finfo(confidence.dtype).min
    keyed = torch.where(candidates, confidence.clamp_min(floor), torch.full_like(confidence, floor))
    run_max = torch.full_like(keyed, floor).scatter_reduce(1, run, keyed, reduce="amax", include_self=True)
    return candidates & (keyed == run_max.gather(1, run))


@register
@dataclass(frozen=True)
class Hierarchy(RuleBase):
    """dInfer hierarchy decoder. Defaults: low_threshold 0.4 (the class default; dInfer's benchmark scripts pass
    0.3 unless a config sets 0.5-0.75), threshold 0.9 (its benchmarks' default; the class default None, the
    rule without the global threshold, is ``rule.threshold=null``)."""

    low_threshold: float | None = 0.4
    threshold: float | None = 0.9
    name: ClassVar[str] = "hierarchy"

    def check(self) -> None:
        for key in ("low_threshold", "threshold"):
            value = getattr(self, key)
            if value is not None and not 0 <= value <= 1:
                raise ValueError(f"hierarchy {key} must be in [0, 1] or null, got {value}")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        conf, cand = ctx.confidence, ctx.candidates
        commit = run_maxima(conf, cand)
        if self.low_threshold is not None:
            commit &= conf > self.low_threshold
        if self.threshold is not None:
            commit |= cand & (conf > self.threshold)
        return commit | topk_commit_mask(conf, cand, 1)
