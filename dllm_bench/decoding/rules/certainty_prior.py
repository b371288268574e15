"""d2Cache's certainty-prior decoding: the schedule's k candidates with the highest confidence x certainty density.

The certainty density of a position is the Gaussian-weighted (``sigma``) share of decoded positions around it, so
the choice leans towards positions next to decoded ones (quasi left-to-right for a small ``sigma``). Published with
d2Cache (Kamichanw/d2Cache ``generation.sigma``, 10 in its d2Cache runs, one token per step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


def certainty_density(decoded: torch.Tensor, sigma: float) -> torch.Tensor:
    """[B, G] float32: per position, sum_j exp(-(i - j)^2 / (2 sigma^2)) d_j over j in [-G, 2G), where d is
    ``decoded`` [B, G] inside the answer, 1 before it and the last position's state after it, divided by the
    kernel's mass over offsets [-3G, 3G) (the published normalisation; taken in float64, rounded once)."""
    B, G = decoded.shape
    dev = decoded.device
    d = decoded.to(torch.float64)
    signal = torch.cat([torch.ones(B, G, dtype=torch.float64, device=dev), d, d[:, -1:].expand(-1, G)], dim=1)
    i = torch.arange(G, device=dev, dtype=torch.float64)
    j = torch.arange(-G, 2 * G, device=dev, dtype=torch.float64)
    kernel = torch.exp(-(i[:, None] - j[None, :]) ** 2 / (2 * sigma**2))  # [G, 3G]
    offsets = torch.arange(-3 * G, 3 * G, device=dev, dtype=torch.float64)
    mass = torch.exp(-(offsets**2) / (2 * sigma**2)).sum()
    return (signal @ kernel.T / mass).float()


@register
@dataclass(frozen=True)
class CertaintyPriorRule(RuleBase):
    """The schedule's k candidates ranked by confidence x certainty_density(decoded, sigma)."""

    sigma: float = 10.0
    name: ClassVar[str] = "certainty_prior"
    adaptive: ClassVar[bool] = False

    def check(self) -> None:
        if not self.sigma > 0:
            raise ValueError(f"certainty_prior sigma must be > 0, got {self.sigma}")

    def check_combination(self, *, policy, cache, gen_length: int, block_length: int) -> None:
        if getattr(policy, "name", None) != "blocks" or policy.steps is None:
            raise ValueError("rule 'certainty_prior' needs a fixed-step schedule: policy 'blocks' with steps (an "
                             "integer; d2Cache's runs: steps = gen_length, one token per step)")

    def commit(self, ctx: StepContext) -> torch.Tensor:
        if ctx.quota is None:
            raise ValueError("the certainty_prior rule needs a fixed-step schedule (policy 'blocks' with steps)")
        density = certainty_density(~ctx.masked, self.sigma).to(ctx.confidence.dtype)
        score = torch.where(ctx.candidates, ctx.confidence * density, float("-inf"))
        return topk_commit_mask(score, ctx.candidates, ctx.quota)
