"""dKV-Cache-Greedy's remasking (horseee/dKV-Cache ``generation_utils/llada_dkv_cache_greedy.py``, the only one it
accepts, ``remasking='random'``): at a block's start one uniform draw per row fixes the order in which the block's
positions are committed, the policy's count per step; the logits give only the tokens. The order is known before a
step's forward, which is what ``cache=dkv_greedy`` needs: it queries the positions the step will commit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register


@dataclass
class OrderState:
    """Each row's draw for its current block (answer coordinates; higher commits first) and the block it is for."""

    order: torch.Tensor  # [B, G] float32
    drawn_for: list[int]  # per row: the block start (answer coordinates) of its draw, -1 before the first


@register
@dataclass(frozen=True)
class RandomOrder(RuleBase):
    """The policy's count per step, in the order of one U(0,1) draw per row and block. The draw is the published
    ``torch.rand((1, L))`` over the row's whole canvas (its real prompt and the answer), from the row's own
    generator (seeded with its seed): a row draws as it does decoded alone."""

    name: ClassVar[str] = "random_order"
    adaptive: ClassVar[bool] = False
    plans: ClassVar[bool] = True

    def check_combination(self, *, policy, cache, gen_length: int, block_length: int) -> None:
        if getattr(policy, "name", None) != "blocks" or policy.steps is None:
            raise ValueError(f"rule 'random_order' commits a fixed count per step in a block's drawn order: it needs "
                             f"policy 'blocks' with steps (an integer), got policy {getattr(policy, 'name', None)!r}"
                             + ("" if getattr(policy, "name", None) != "blocks" else " with steps=None"))

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> OrderState:
        return OrderState(torch.zeros(batch, gen_length, device=device), [-1] * batch)

    def plan(self, state: OrderState, rows: Sequence[int], block_lo: Sequence[int],
             generators: Sequence[torch.Generator], canvas_lengths: Sequence[int]) -> torch.Tensor:
        """Draw for the rows of ``rows`` that entered a new block (host lists, no device read); the order [B, G]."""
        G = state.order.shape[1]
        for r in rows:
            if block_lo[r] != state.drawn_for[r]:
                draw = torch.rand((1, canvas_lengths[r]), generator=generators[r], device=state.order.device)
                state.order[r] = draw[0, -G:]
                state.drawn_for[r] = block_lo[r]
        return state.order

    def commit(self, ctx: StepContext) -> torch.Tensor:
        if ctx.quota is None:
            raise ValueError("rule 'random_order' needs a fixed-step schedule (policy 'blocks' with steps)")
        return topk_commit_mask(ctx.state.order, ctx.candidates, ctx.quota)
