"""CreditDecoding: a per-block credit per position and token that grows while a token stays the top-1, fused
into the logits before the choice; then dInfer's threshold.

Published code: inclusionAI/dInfer ``python/dinfer/decoding/parallel_strategy.py``
``CreditThresholdParallelDecoder``. Each step, at every masked position of the block: C <- beta * C, then
C[top1] += p(top1)^gamma (top-1 of the raw logits' float32 softmax); fused = logits + alpha * log(1 + C); the
token is the argmax of the fused logits and the step commits every candidate whose fused confidence is
>= min(max - 1e-5, threshold) (dInfer's ``get_transfer_index_threshold``: ties within 1e-5 of the best all
commit). The credit starts at zero in every block. This rule keeps state across steps and changes the logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


@dataclass
class CreditState:
    """The credit of each row's current block: [B, block_length, V] float32 (allocated at the first step, when V
    is known) and the block start it belongs to ([B] long; -1 = none yet)."""

    block_length: int
    block_lo: torch.Tensor
    credit: torch.Tensor | None = None


@register
@dataclass(frozen=True)
class CreditDecoding(RuleBase):
    """CreditDecoding with dInfer's defaults: alpha 0.7, gamma 0.2, beta 0.8; threshold 0.9 (its benchmarks'
    ``--threshold`` default)."""

    threshold: float = 0.9
    alpha: float = 0.7
    gamma: float = 0.2
    beta: float = 0.8
    name: ClassVar[str] = "credit"

    def check(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"credit threshold must be in (0, 1], got {self.threshold}")
        if self.alpha < 0 or self.gamma < 0 or not 0 <= self.beta <= 1:
            raise ValueError(f"credit needs alpha >= 0, gamma >= 0, beta in [0, 1], got alpha {self.alpha}, "
                             f"gamma {self.gamma}, beta {self.beta}")

    def check_combination(self, *, policy, cache, gen_length: int, block_length: int) -> None:
        if getattr(policy, "name", None) != "blocks":
            raise ValueError(f"rule 'credit' keeps its credit per block of policy 'blocks' (dInfer's block loop), "
                             f"got policy {policy.name!r}")

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> CreditState:
        return CreditState(block_length, torch.full((batch,), -1, dtype=torch.long, device=device))

    def fuse_logits(self, state: CreditState, logits: torch.Tensor, row: torch.Tensor, position: torch.Tensor,
                    block_lo: torch.Tensor) -> torch.Tensor:
        """Update the credit at the candidates (rows ``row``, answer positions ``position``) and return their
        fused logits [N, V]."""
        if state.credit is None:
            state.credit = torch.zeros(state.block_lo.shape[0], state.block_length, logits.shape[-1],
                                       dtype=torch.float32, device=logits.device)
        fresh = block_lo != state.block_lo  # a row entered a new block: its credit starts at zero
        state.credit.mul_((~fresh).to(torch.float32)[:, None, None])
        state.block_lo = block_lo.clone()
        offset = position - block_lo.index_select(0, row)
        credit = state.credit[row, offset] * self.beta  # a candidate is masked at every step of its block
        top1, index = torch.softmax(logits.to(torch.float32), dim=-1).max(dim=-1)
        credit.scatter_add_(1, index.unsqueeze(1), top1.pow(self.gamma).unsqueeze(1))
        state.credit[row, offset] = credit
        return logits + self.alpha * torch.log(credit + 1)

    def commit(self, ctx: StepContext) -> torch.Tensor:
        conf = ctx.confidence
        best = conf.amax(dim=-1, keepdim=True)
        return ctx.candidates & (conf >= (best - 1e-5).clamp(-1000, self.threshold))
