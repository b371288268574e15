"""DMax's soft parallel decoding (czg1225/DMax, its dInfer copy: ``ThresholdParallelDecoder.decode_uniform`` with
``BlockDiffusionRunner.decode_uniform``): blocks on the absolute grid whose decoded tokens are re-predicted every
step and fed back as soft inputs, a mix of the token's and the mask's embeddings by the token's probability."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.policies.base import (
    PolicyBase,
    register,
    span_mask,
)
from dllm_bench.decoding.rules.base import StepContext, rule_tokens


@dataclass
class SoftState:
    """Per-row progress of ``SoftPolicy`` and what the next forward feeds softly."""

    block_length: int
    gen_length: int
    num_blocks: torch.Tensor  # [B] long: grid blocks holding answer positions
    offset: torch.Tensor  # [B] long: answer position 0's place in its grid block (real prompt length mod block)
    block: torch.Tensor  # [B] long: index of the current grid block, counted from the one holding answer position 0
    step_in_block: torch.Tensor  # [B] long: forwards the current block has taken
    undecided: torch.Tensor  # [B, G] bool: positions of the current block masked when it began
    soft: torch.Tensor  # [B, G] bool: positions the next forward feeds softly
    soft_prob: torch.Tensor  # [B, G] float32: the probability of the token there (the mix's weight)
    settled: torch.Tensor  # [B] bool: the step ended the block (set by ``revise``)
    prefilled: torch.Tensor  # [B] bool: the prefill forward ran (``prefill``; True from the start without it)
    had_mask: torch.Tensor  # [B] bool: the step began with a mask in the block (set by ``decide``)


def _unit(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"dmax {name} must be a number in [0, 1], got {value!r}")


# the published scripts' thresholds (czg1225/DMax dInfer/evaluations/eval_llada_dmax_math.sh 0.5, _code.sh 0.65),
# each a conf/policy/dmax_<name>.yaml
SOFT_PRESETS: dict[str, dict[str, Any]] = {
    "math": {"threshold": 0.5, "settle": 0.9},
    "code": {"threshold": 0.65, "settle": 0.9},
}


@register
@dataclass(frozen=True)
class SoftPolicy(PolicyBase):
    """DMax soft parallel decoding over blocks: prefix-threshold commits, re-prediction of decoded tokens, soft inputs.

    Blocks tile the row from its first real prompt token (dInfer's block-diffusion iterator), so the first block
    completes the prompt's last partial one. Each step of a block commits the masked block positions left of the
    first one whose top-1 probability is below ``threshold`` (the leftmost masked one when none qualifies; or the
    configured rule's commit), and rewrites every token decoded earlier in the block (never a prompt token) with
    this step's argmax. The next
    forward feeds each decoded position of the block p·e(token) + (1 − p)·e(mask), rescaled to the norm
    p·|e(token)| + (1 − p)·|e(mask)|, p the token's probability. A block ends when every position it decodes
    has p ≥ ``settle`` or a step changes nothing, at most ``block_length`` steps.

    dInfer's loop as published: ``prefill`` runs one forward before the first block that commits nothing (its
    K/V prefill of the prompt's full blocks, counted in its ``num_forwards``); ``eos_stop`` ends a row after a
    block that holds the stop id, the rest of its answer then that id (its ``early_stop``).
    """

    threshold: float = 0.5
    settle: float = 0.9
    prefill: bool = False
    eos_stop: bool = False
    name: ClassVar[str] = "dmax"
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = SOFT_PRESETS
    flavours: ClassVar[tuple[str, ...]] = ("llada",)
    measure: ClassVar[str] = "top1_prob"
    unshifted_logits: ClassVar[bool] = True
    blocks_from_answer: ClassVar[bool] = False

    def check(self) -> None:
        _unit("threshold", self.threshold)
        _unit("settle", self.settle)
        if self.threshold > self.settle:  # a block could settle with masks left, which no later step commits
            raise ValueError(f"dmax threshold must be <= settle ({self.settle}), got {self.threshold}")

    def ends_rows_early(self) -> str | None:
        return "dmax eos_stop" if self.eos_stop else None

    def refuse_rule(self, rule: Any) -> str | None:
        if rule is not None and not rule.adaptive:
            return (f"policy 'dmax' runs a block until its tokens settle: a fixed-count rule ({rule.name!r}) has no "
                    "count to follow here; give an adaptive rule or none")
        if rule is not None and not rule.measure_overridable and rule.measure != self.measure:
            return (f"policy 'dmax' weighs soft inputs by the top-1 probability; rule {rule.name!r} ranks by "
                    f"{rule.measure!r}, whose thresholds are in other units")
        return None

    def refuse_cache(self, cache: Any) -> str | None:
        if not cache.stateless:
            return (f"policy 'dmax' feeds soft inputs that change every step at every decoded block position: "
                    f"it runs without a cache here, got cache {cache.name!r}")
        return None

    def refuse_cfg(self, cfg_scale: float) -> str | None:
        if cfg_scale != 0:
            return f"policy 'dmax' has no classifier-free guidance (the published loop has none), got cfg_scale {cfg_scale}"
        return None

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> SoftState:
        z = torch.zeros(batch, dtype=torch.long, device=device)
        no = torch.zeros(batch, dtype=torch.bool, device=device)
        grid = torch.zeros(batch, gen_length, dtype=torch.bool, device=device)
        state = SoftState(block_length, gen_length, num_blocks=z, offset=z.clone(), block=z.clone(),
                          step_in_block=z.clone(), undecided=grid, soft=grid.clone(),
                          soft_prob=torch.zeros(batch, gen_length, device=device), settled=no, had_mask=no.clone(),
                          prefilled=torch.full_like(no, not self.prefill))
        self._place(state, z)
        return state

    def _place(self, state: SoftState, offset: torch.Tensor) -> None:
        L, G = state.block_length, state.gen_length
        state.offset = offset
        state.num_blocks = torch.div(offset + G + L - 1, L, rounding_mode="floor")
        lo, hi = self.block(state)
        state.undecided = span_mask(lo, hi, G)

    def place_prompt(self, state: SoftState, prompt_mask: torch.Tensor, config: Any) -> None:
        L, size = state.block_length, getattr(config, "block_size", 0)
        if getattr(config, "attention", "full") == "block_causal" and size and L != size:
            raise ValueError(f"block_length {L} differs from the model's block_size {size} (its block-causal "
                             "attention runs at that size; DMax's blocks are its attention's)")
        self._place(state, prompt_mask.sum(dim=1).to(torch.long) % L)

    def block(self, state: SoftState) -> tuple[torch.Tensor, torch.Tensor]:
        L, G = state.block_length, state.gen_length
        grid_lo = state.block * L - state.offset
        return grid_lo.clamp(0, G), (grid_lo + L).clamp(0, G)

    def read(self, state: SoftState, read: torch.Tensor, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        return read | (state.undecided & active.unsqueeze(1))

    def soft_inputs(self, state: SoftState, runner: Any, x: torch.Tensor, active: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """p·e(token) + (1 − p)·e(mask) at the soft positions, rescaled to the mix of the two norms."""
        embed = getattr(runner.model, "embed", None)
        if embed is None:
            raise ValueError(f"policy 'dmax' feeds input embeddings: the model ({type(runner.model).__name__}) must "
                             "expose its token embedding as .embed (our networks do)")
        P = x.shape[1] - state.soft.shape[1]
        where = torch.cat([state.soft.new_zeros(x.shape[0], P), state.soft & active.unsqueeze(1)], dim=1)
        tokens = embed(x)
        mask_vec = embed(torch.full_like(x[:1, :1], runner.mask_token_id))  # [1, 1, d]
        p = torch.cat([state.soft_prob.new_zeros(x.shape[0], P), state.soft_prob], dim=1).unsqueeze(-1)
        mixed = tokens * p + mask_vec * (1 - p)
        target = tokens.norm(dim=-1, keepdim=True) * p + mask_vec.norm(dim=-1, keepdim=True) * (1 - p)
        mixed = mixed * (target / (mixed.norm(dim=-1, keepdim=True) + 1e-6))
        return where, mixed.to(tokens.dtype)

    def decide(self, state: SoftState, ctx: StepContext, rule) -> tuple[torch.Tensor, torch.Tensor]:
        cand, conf = ctx.candidates, ctx.confidence
        state.had_mask = cand.any(dim=1)
        if rule is not None:
            commit, tokens = rule.commit(ctx), rule_tokens(rule, ctx)
        else:
            low = cand & (conf < self.threshold)
            before_low = cand & (low.long().cumsum(dim=1) == 0)
            leftmost = cand & (cand.long().cumsum(dim=1) == 1)
            commit = torch.where(before_low.any(dim=1, keepdim=True), before_low, leftmost)
            tokens = ctx.prediction
        return commit & state.prefilled.unsqueeze(1), tokens

    def revise(self, state: SoftState, ctx: StepContext, answer: torch.Tensor, active: torch.Tensor,
               mask_id: int) -> torch.Tensor:
        """Every block token decoded before this step takes this step's argmax; the soft inputs of the next step."""
        rows = (active & state.prefilled).unsqueeze(1)
        undecided = state.undecided & rows
        p, x0 = ctx.read_confidence, ctx.read_prediction
        edit = undecided & ~ctx.masked & (x0 != answer)
        committed = undecided & ctx.masked & (answer != mask_id)
        answer.copy_(torch.where(edit, x0, answer))
        decoded = undecided & (answer != mask_id)
        state.settled = state.prefilled & ((~undecided | (p >= self.settle)).all(dim=1) | ~(edit | committed).any(dim=1))
        state.soft = decoded
        state.soft_prob = torch.where(decoded, p, 0).float()
        return edit

    def finished(self, state: SoftState, answer: torch.Tensor, masked: torch.Tensor, active: torch.Tensor,
                 stop_id: int | None) -> torch.Tensor:
        lo, hi = self.block(state)
        block = state.block.clone()
        done = self.advance(state, masked, active)
        if self.eos_stop and stop_id is not None:  # a block that ended holding the stop id ends the row
            ended = active & (state.block != block)
            done = done | (ended & (span_mask(lo, hi, answer.shape[1]) & (answer == stop_id)).any(dim=1))
        return done

    def advance(self, state: SoftState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        decoding = active & state.prefilled
        state.prefilled = state.prefilled | active
        state.step_in_block += decoding.long()
        done = decoding & (state.settled | (state.step_in_block >= state.block_length))
        state.block += done.long()
        state.step_in_block = torch.where(done, 0, state.step_in_block)
        lo, hi = self.block(state)
        fresh = span_mask(lo, hi, masked.shape[1]) & masked
        state.undecided = torch.where(done.unsqueeze(1), fresh, state.undecided)
        state.soft &= ~done.unsqueeze(1)
        return state.block >= state.num_blocks
