"""WINO (Feng-Hong/WINO-DLLM, LLaDA/decoding.py): wide-in, narrow-out revokable decoding over LLaDA blocks, with a
shadow forward that re-scores the decoded tokens; its own rule, no cache, LLaDA models only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.forward import ForwardResult
from dllm_bench.decoding.policies.base import PolicyBase, blocked_bounds, register, span_mask
from dllm_bench.decoding.rules.base import StepContext

# WINO's fixed caps (Feng-Hong/WINO-DLLM LLaDA/decoding.py): a step accepts at most
# min(max(floor(0.7 * masked in block), 5), 20) tokens, and a block's first step treats the previous step as
# having accepted 30 (so at most 29 revocations)
WINO_ACCEPT_RATIO, WINO_ACCEPT_MIN, WINO_ACCEPT_MAX = 0.7, 5, 20
WINO_FIRST_LAST_ACCEPT = 30


@dataclass
class WinoState:
    """Per-row progress of ``WinoPolicy`` ([B] long tensors) and what the step's shadow forward measured."""

    block_length: int
    num_blocks: int
    block: torch.Tensor  # index of the current block
    last_accept: torch.Tensor  # tokens the previous step of this block accepted
    back: torch.Tensor | None = None  # [B, G] float64: shadow probability of each decoded block token, +inf elsewhere
    revoke: torch.Tensor | None = None  # [B, G] bool: decoded tokens this step re-masks (set by ``decide``)


@register
@dataclass(frozen=True)
class WinoPolicy(PolicyBase):
    """WINO: wide-in, narrow-out revokable decoding over LLaDA blocks, with a shadow forward.

    Every forward appends a shadow copy of the current block (mask tokens at the block's position ids): the
    canvas never attends to it; shadow query i attends the shadow block and the whole canvas except the real
    position i, so it re-scores the token decoded there. Wide in: commit every masked block position with
    confidence > ``threshold`` (at most min(max(floor(0.7 m), 5), 20) of the m masked ones, the most
    confident; the top one if none passes). Narrow out: when more than one is committed, re-mask the decoded
    tokens whose shadow probability is < ``threshold_back`` (the lowest last_accept - 1 of them when there are
    at least as many as the previous step accepted). A block runs until it holds no mask.
    """

    threshold: float = 0.6
    threshold_back: float = 0.9
    name: ClassVar[str] = "wino"
    flavours: ClassVar[tuple[str, ...]] = ("llada",)
    measure: ClassVar[str] = "top1_prob"

    def check(self) -> None:
        for key in ("threshold", "threshold_back"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"wino {key} must be a number in [0, 1], got {value!r}")

    def refuse_rule(self, rule: Any) -> str | None:
        if rule is not None:
            return (f"policy 'wino' has its own commit rule (wide in > threshold, narrow out < "
                    f"threshold_back): rule must be none, got {rule.name!r}")
        return None

    def refuse_cache(self, cache: Any) -> str | None:
        if not cache.stateless:
            return (f"policy 'wino' runs only without a cache (the published loop recomputes the whole "
                    f"canvas and its shadow block every step), got cache {cache.name!r}")
        return None

    def refuse_cfg(self, cfg_scale: float) -> str | None:
        if cfg_scale != 0:
            return (f"policy 'wino' has no classifier-free guidance (the published loop has none), "
                    f"got cfg_scale {cfg_scale}")
        return None

    def check_model(self, config: Any) -> None:
        if getattr(config, "shift_logits", False):
            raise ValueError(f"policy {self.name!r} re-scores a token at its own position, which a model with "
                             "shifted logits (Dream) does not predict there: run it on a LLaDA-format model")

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> WinoState:
        z = torch.zeros(batch, dtype=torch.long, device=device)
        return WinoState(block_length, gen_length // block_length, block=z,
                         last_accept=torch.full_like(z, WINO_FIRST_LAST_ACCEPT))

    def block(self, state: WinoState) -> tuple[torch.Tensor, torch.Tensor]:
        return blocked_bounds(state)

    def forward(self, state: WinoState, runner: Any, x: torch.Tensor, rows: torch.Tensor, read: torch.Tensor,
                view: Any) -> list:
        """Its own forward instead of a cache's: the canvas and the shadow block."""
        return [self.shadow_forward(runner.model, x, rows, state, read, runner.mask, runner.P, runner.mask_token_id,
                                    runner.prompt_real)]

    def shadow_forward(self, model, x: torch.Tensor, rows: torch.Tensor, state: WinoState, candidates: torch.Tensor,
                       key_mask: torch.Tensor | None, prompt_length: int, mask_token_id: int,
                       prompt_real: torch.Tensor):
        """One forward of ``rows`` over canvas + shadow block: the candidates' logits as a ``ForwardResult``;
        sets ``state.back`` (shadow probability of every decoded block token, float64 softmax)."""
        P, L = prompt_length, state.block_length
        B, T = x.shape
        G = T - P
        inp = x.index_select(0, rows)
        b = inp.shape[0]
        lo = (state.block * L).index_select(0, rows)
        block_pos = P + lo.unsqueeze(1) + torch.arange(L, device=x.device)  # [b, L] canvas positions
        keys = None if key_mask is None else key_mask.index_select(0, rows).bool()
        base = (torch.arange(T, device=x.device).expand(b, T) if keys is None
                else (keys.long().cumsum(-1) - 1).clamp(min=0))
        position_ids = torch.cat([base, base.gather(1, block_pos)], dim=1)
        ext = torch.cat([inp, torch.full((b, L), mask_token_id, dtype=inp.dtype, device=inp.device)], dim=1)
        ext_keys = None if keys is None else torch.cat([keys, keys.new_ones(b, L)], dim=1)
        pair = torch.ones(b, T + L, T + L, dtype=torch.bool, device=x.device)
        pair[:, :, T:] = False  # nothing in the canvas sees the shadow block
        pair[:, T:, T:] = True  # the shadow block sees itself
        own = torch.arange(T, device=x.device).view(1, 1, T) == block_pos.unsqueeze(2)
        pair[:, T:, :T] = ~own  # shadow i sees the canvas except its own real position
        held = inp.gather(1, block_pos)  # [b, L] the tokens at the block's positions
        cand = candidates.index_select(0, rows)
        at_c = cand.nonzero(as_tuple=True)  # the step's one read: how many candidates the LM head runs on
        n_c = at_c[0].numel()
        shadow_rows = torch.arange(b, device=x.device).repeat_interleave(L)
        shadow_pos = T + torch.arange(L, device=x.device).repeat(b)
        logits_at = (torch.cat([at_c[0], shadow_rows]), torch.cat([P + at_c[1], shadow_pos]))
        logits = model(ext, attention_mask=ext_keys, position_ids=position_ids, logits_at=logits_at,
                       query_key_mask=pair)
        probs = torch.softmax(logits[n_c:].to(torch.float64), dim=-1).gather(1, held.reshape(-1, 1)).view(b, L)
        back = torch.full((B, G), float("inf"), dtype=torch.float64, device=x.device)
        back[rows.unsqueeze(1), block_pos - P] = torch.where(held != mask_token_id, probs, float("inf"))
        state.back = back
        positions = prompt_real.index_select(0, rows) + G + L  # the shadow block is computed too
        return ForwardResult(rows, logits[:n_c], 0, True, positions, at=at_c)

    def decide(self, state: WinoState, ctx: StepContext, rule) -> tuple[torch.Tensor, torch.Tensor]:
        cand, conf = ctx.candidates, ctx.confidence
        masked_now = cand.sum(dim=1)
        cap = (masked_now.to(torch.float64) * WINO_ACCEPT_RATIO).floor().long()
        cap = cap.clamp(min=WINO_ACCEPT_MIN).clamp(max=WINO_ACCEPT_MAX)
        above = (cand & (conf > self.threshold)).sum(dim=1)
        accept = above.minimum(cap).clamp(min=1).minimum(masked_now)
        commit = topk_commit_mask(conf, cand, accept)
        lo, hi = self.block(state)
        decoded = span_mask(lo, hi, cand.shape[1]) & ~ctx.masked
        low = decoded & (state.back < self.threshold_back)
        n_low = low.sum(dim=1)
        n_revoke = torch.where(n_low >= state.last_accept, state.last_accept - 1, n_low)
        n_revoke = torch.where(accept > 1, n_revoke, 0)
        state.revoke = topk_commit_mask(-state.back, low, n_revoke)
        state.last_accept = accept
        return commit, ctx.prediction

    def revise(self, state: WinoState, ctx: StepContext, answer: torch.Tensor, active: torch.Tensor,
               mask_id: int) -> torch.Tensor:
        """Narrow out: the decoded tokens the shadow block re-scored low (``decide`` chose them) are masked again."""
        revoked = state.revoke & active.unsqueeze(1)
        answer.copy_(torch.where(revoked, mask_id, answer))
        return revoked

    def advance(self, state: WinoState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        lo, hi = self.block(state)
        done = active & ~(masked & span_mask(lo, hi, masked.shape[1])).any(dim=1)
        state.block += done.long()
        state.last_accept = torch.where(done, WINO_FIRST_LAST_ACCEPT, state.last_accept)
        return state.block >= state.num_blocks
