"""LocalLeap: anchors are candidates with confidence >= threshold; candidates within ``radius`` positions of an
anchor are committed at the relaxed ``relaxed_threshold``; at least the most confident candidate.

No published code was found for it (the paper's description only); the issue's defaults threshold 0.9, relaxed 0.75,
radius 4 are used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


@register
@dataclass(frozen=True)
class LocalLeap(RuleBase):
    """LocalLeap: every candidate >= threshold, plus every candidate >= relaxed_threshold at distance <= radius from
    one."""

    threshold: float = 0.9
    relaxed_threshold: float = 0.75
    radius: int = 4
    name: ClassVar[str] = "local_leap"

    def check(self) -> None:
        if not 0 < self.relaxed_threshold <= self.threshold <= 1:
            raise ValueError(f"local_leap needs 0 < relaxed_threshold <= threshold <= 1, got relaxed_threshold "
                             f"{self.relaxed_threshold}, "
                             f"threshold {self.threshold}")
        if self.radius < 0:
            raise ValueError(f"local_leap radius must be >= 0, got {self.radius}")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        conf, cand = ctx.confidence, ctx.candidates
        anchors = cand & (conf >= self.threshold)
        width = 2 * self.radius + 1
        near = torch.nn.functional.max_pool1d(anchors.unsqueeze(1).to(conf.dtype), width, stride=1,
                                              padding=self.radius).squeeze(1) > 0
        commit = anchors | (cand & near & (conf >= self.relaxed_threshold))
        return commit | topk_commit_mask(conf, cand, 1)
