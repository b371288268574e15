"""LLaDA's semi-autoregressive blocks: a block runs a fixed number of steps (the configured rule commits the
schedule's count) or, with ``steps`` None, until an adaptive rule has filled it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.policies.base import PolicyBase, blocked_bounds, is_positive_int, register, span_mask
from dllm_bench.decoding.rules.base import RULES, StepContext, rule_tokens
from dllm_bench.decoding.schedules import llada_transfer_counts


@dataclass
class BlockState:
    """Per-row progress of ``BlockPolicy``: the current block and the steps taken in it ([B] long tensors)."""

    block_length: int
    num_blocks: int
    block: torch.Tensor  # index of the current block
    step_in_block: torch.Tensor  # steps taken in the current block
    steps_per_block: int | None = None  # fixed steps per block (None: adaptive, a block runs until full)
    commit_counts: torch.Tensor | None = None  # [steps_per_block] tokens committed at each step of a block
    hold: bool = False  # rows leave a block together, once every active row's is done (``hold_blocks``)


@register
@dataclass(frozen=True)
class BlockPolicy(PolicyBase):
    """LLaDA semi-autoregressive blocks; ``steps`` total fixed steps (top-k) or None (adaptive, until full)."""

    steps: int | None = None
    name: ClassVar[str] = "blocks"

    def check(self) -> None:
        if self.steps is not None and not is_positive_int(self.steps):
            raise ValueError(f"{self.name} steps must be >= 1 or None, got {self.steps}")

    def refuse_rule(self, rule: Any) -> str | None:
        if rule is None:
            return f"policy {self.name!r} has no commit rule of its own: choose a rule ({', '.join(sorted(RULES))})"
        if rule.adaptive and not rule.takes_steps and self.steps is not None:
            return (f"rule {rule.name!r} is adaptive (a block runs until full): policy {self.name!r} needs steps=None, "
                    f"got steps={self.steps}")
        return None

    def refuse_lengths(self, gen_length: int, block_length: int) -> str | None:
        num_blocks = gen_length // block_length
        if self.steps is not None and self.steps % num_blocks:
            return f"steps {self.steps} is not divisible by the number of blocks {num_blocks}"
        return None

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> BlockState:
        num_blocks = gen_length // block_length
        state = BlockState(block_length, num_blocks, block=torch.zeros(batch, dtype=torch.long, device=device),
                           step_in_block=torch.zeros(batch, dtype=torch.long, device=device))
        if self.steps is not None:
            per_block = self.steps // num_blocks
            state.steps_per_block = per_block
            state.commit_counts = llada_transfer_counts(torch.tensor([block_length], device=device), per_block)[0]
        return state

    def block(self, state: BlockState) -> tuple[torch.Tensor, torch.Tensor]:
        return blocked_bounds(state)

    def decide(self, state: BlockState, ctx: StepContext, rule) -> tuple[torch.Tensor, torch.Tensor]:
        k = None
        if self.steps is not None:
            last = state.step_in_block >= state.steps_per_block - 1
            k = state.commit_counts[state.step_in_block.clamp(max=state.steps_per_block - 1)]
            # a block's last step commits whatever is left (e.g. after a refresh forced a single commit), as
            # Dream's published cache loop does; with LLaDA's counts this is exactly the scheduled k
            k = torch.where(last, ctx.candidates.sum(dim=1), k)
            ctx.last_step = last
        ctx.quota = k
        return rule.commit(ctx), rule_tokens(rule, ctx)

    def advance(self, state: BlockState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        state.step_in_block += active.long()
        lo, hi = self.block(state)
        full = ~(masked & span_mask(lo, hi, masked.shape[1])).any(dim=1)
        # fixed steps: a block ends after its steps, or earlier once full (a rule that takes steps may fill it
        # early, as KLASS's loop breaks; a fixed count fills it exactly at its last step)
        done = full if self.steps is None else full | (state.step_in_block >= state.steps_per_block)
        done &= active
        if state.hold:
            done &= (done | ~active).all()
        state.block += done.long()
        state.step_in_block = torch.where(done, 0, state.step_in_block)
        return state.block >= state.num_blocks

    def hold_blocks(self, state: BlockState) -> None:
        state.hold = True
