"""LLaDA2.1's editing decoder (ZHZisZZ/dllm ``pipelines/llada21/sampler.py``; SGLang's ``JointThreshold``): blocks
that commit masks by a threshold (mask to token) and rewrite committed tokens whose prediction changed with a
probability above an edit threshold (token to token), with edit-only steps after a block is full. Blocks lie on the
absolute grid, as in both published loops: they tile the row from its first prompt token, the prompt's last partial
block completed first."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.policies.base import (
    PolicyBase,
    advance_and_stop_after_block,
    grid_bounds,
    grid_offset,
    register,
    span_mask,
)
from dllm_bench.decoding.rules.base import StepContext, rule_tokens

# where a block's loop checks its post-step cap: "dllm" before the forward (a block ends without one), "sglang"
# after it (the forward that exceeds the cap is run and counted, and applies nothing)
LOOPS = ("dllm", "sglang")


@dataclass
class EditState:
    """Per-row progress of ``EditPolicy`` ([B] tensors) and what the step saw."""

    block_length: int
    gen_length: int
    block: torch.Tensor  # long: grid block index, counted from the block holding answer position 0
    offset: torch.Tensor  # long: answer position 0's place in its block (real prompt length mod block_length)
    num_blocks: torch.Tensor  # long: grid blocks the answer spans
    post_steps: torch.Tensor  # long: steps of the current block that began with no mask in it
    had_mask: torch.Tensor  # bool: the step began with a mask in the block (set by ``decide``)
    edited: torch.Tensor  # bool: the step rewrote a committed token (set by ``revise``)


def _probability(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"llada21 {name} must be a number in [0, 1], got {value!r}")


# the published parameterisations, each a conf/policy/llada21_<name>.yaml: the dllm sampler's defaults
# (LLaDA21SamplerConfig) and SGLang's JointThreshold defaults (its algorithm_config: threshold 0.5, edit_threshold 0,
# max_post_edit_steps 16)
EDIT_PRESETS: dict[str, dict[str, Any]] = {
    "dllm": {"threshold": 0.95, "edit_threshold": 0.9, "max_post_steps": 16, "min_commit": 1, "loop": "dllm"},
    "sglang": {"threshold": 0.5, "edit_threshold": 0.0, "max_post_steps": 16, "min_commit": 1, "loop": "sglang"},
}


@register
@dataclass(frozen=True)
class EditPolicy(PolicyBase):
    """LLaDA2.1 joint-threshold decoding over blocks, with token-to-token edits.

    Each step of a block: commit every masked block position whose top-1 probability is > ``threshold`` (the
    ``min_commit`` most confident when fewer pass; or the configured rule's commit), and rewrite every token
    committed before the step (never a prompt token) whose argmax now differs with probability >
    ``edit_threshold``. A step that begins with the block full is a post step: the block ends after a post step
    that edits nothing, or when its post steps exceed ``max_post_steps`` (``loop`` says where that cap is
    checked; see ``LOOPS``). ``stop_after_block``: a row ends after the block that leaves a stop token in its
    answer (the dllm sampler's ``eos_early_stop``).
    """

    threshold: float = 0.95
    edit_threshold: float = 0.9
    max_post_steps: int = 16
    min_commit: int = 1
    loop: str = "dllm"
    stop_after_block: bool = False
    name: ClassVar[str] = "llada21"
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = EDIT_PRESETS
    flavours: ClassVar[tuple[str, ...]] = ("llada",)
    measure: ClassVar[str] = "top1_prob"
    unshifted_logits: ClassVar[bool] = True
    blocks_from_answer: ClassVar[bool] = False

    def check(self) -> None:
        _probability("threshold", self.threshold)
        _probability("edit_threshold", self.edit_threshold)
        if isinstance(self.max_post_steps, bool) or not isinstance(self.max_post_steps, int) or self.max_post_steps < 0:
            raise ValueError(f"llada21 max_post_steps must be an integer >= 0, got {self.max_post_steps!r}")
        if isinstance(self.min_commit, bool) or not isinstance(self.min_commit, int) or self.min_commit < 1:
            raise ValueError(f"llada21 min_commit must be an integer >= 1, got {self.min_commit!r}")
        if self.loop not in LOOPS:
            raise ValueError(f"llada21 loop must be one of {', '.join(LOOPS)}, got {self.loop!r}")
        if not isinstance(self.stop_after_block, bool):
            raise ValueError(f"llada21 stop_after_block must be true or false, got {self.stop_after_block!r}")

    def ends_rows_early(self) -> str | None:
        return "llada21 stop_after_block" if self.stop_after_block else None

    def refuse_rule(self, rule: Any) -> str | None:
        if rule is not None and not rule.adaptive:
            return (f"policy 'llada21' runs a block until it is full and its edits settle: a fixed-count rule "
                    f"({rule.name!r}) has no count to follow here; give an adaptive rule or none")
        if rule is not None and not rule.measure_overridable and rule.measure != self.measure:
            return (f"policy 'llada21' edits by the top-1 probability; rule {rule.name!r} ranks by "
                    f"{rule.measure!r}, whose thresholds are in other units")
        return None

    def refuse_cache(self, cache: Any) -> str | None:
        if not cache.stateless:
            return (f"policy 'llada21' recomputes the canvas every step (its published loops keep no cache of the "
                    f"block it edits), got cache {cache.name!r}")
        return None

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> EditState:
        z = torch.zeros(batch, dtype=torch.long, device=device)
        no = torch.zeros(batch, dtype=torch.bool, device=device)
        return EditState(block_length, gen_length, block=z, offset=z.clone(),
                         num_blocks=torch.full_like(z, -(-gen_length // block_length)), post_steps=z.clone(),
                         had_mask=no, edited=no.clone())

    def place_prompt(self, state: EditState, prompt_mask: torch.Tensor, config: Any) -> None:
        state.offset = grid_offset(prompt_mask, state.block_length, config)
        state.num_blocks = (state.offset + state.gen_length + state.block_length - 1) // state.block_length

    def block(self, state: EditState) -> tuple[torch.Tensor, torch.Tensor]:
        return grid_bounds(state.block, state.block_length, state.offset, state.gen_length)

    def read(self, state: EditState, read: torch.Tensor, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        lo, hi = self.block(state)
        return read | (span_mask(lo, hi, masked.shape[1]) & ~masked & active.unsqueeze(1))

    def decide(self, state: EditState, ctx: StepContext, rule) -> tuple[torch.Tensor, torch.Tensor]:
        cand, conf = ctx.candidates, ctx.confidence
        state.had_mask = cand.any(dim=1)
        if rule is not None:
            return rule.commit(ctx), rule_tokens(rule, ctx)
        above = cand & (conf > self.threshold)
        fallback = topk_commit_mask(conf, cand, cand.sum(dim=1).clamp(max=self.min_commit))
        commit = torch.where((above.sum(dim=1) >= self.min_commit).unsqueeze(1), above, fallback)
        return commit, ctx.prediction

    def _capped(self, state: EditState) -> torch.Tensor:
        """[B] bool: this step is the post step past the cap (SGLang's loop runs its forward and applies nothing)."""
        post = state.post_steps + (~state.had_mask).long()
        return (~state.had_mask) & (post > self.max_post_steps) if self.loop == "sglang" else torch.zeros_like(
            state.had_mask)

    def revise(self, state: EditState, ctx: StepContext, answer: torch.Tensor, active: torch.Tensor,
               mask_id: int) -> torch.Tensor:
        """Token to token: committed block tokens (before this step) whose argmax changed with p > edit_threshold."""
        lo, hi = self.block(state)
        editable = span_mask(lo, hi, answer.shape[1]) & ~ctx.masked & active.unsqueeze(1)
        x0 = ctx.read_prediction
        edit = editable & (ctx.read_confidence > self.edit_threshold) & (x0 != answer)
        edit &= ~self._capped(state).unsqueeze(1)
        answer.copy_(torch.where(edit, x0, answer))
        state.edited = edit.any(dim=1)
        return edit

    def advance(self, state: EditState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        capped = self._capped(state)
        post = state.post_steps + (~state.had_mask & active).long()
        lo, hi = self.block(state)
        full = ~(masked & span_mask(lo, hi, masked.shape[1])).any(dim=1)
        settled = ~state.had_mask & ~state.edited  # a post step that edited nothing
        if self.loop == "sglang":
            done = settled | capped
        else:  # the next step would be a post step past the cap: the block ends before its forward
            done = settled | (full & (post + 1 > self.max_post_steps))
        done &= active
        state.post_steps = torch.where(done, 0, post)
        state.block += done.long()
        return state.block >= state.num_blocks

    def unsettled(self, state: EditState, masked: torch.Tensor) -> torch.Tensor:
        """The masks, and the current block's tokens (edits may still rewrite them until the block ends)."""
        lo, _ = self.block(state)
        j = torch.arange(masked.shape[1], device=masked.device).unsqueeze(0)
        return masked | (j >= lo.unsqueeze(1))

    def finished(self, state: EditState, answer: torch.Tensor, masked: torch.Tensor, active: torch.Tensor,
                 stop_id: int | None) -> torch.Tensor:
        return advance_and_stop_after_block(self, state, answer, masked, active, stop_id)
