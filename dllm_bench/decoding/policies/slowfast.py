"""SlowFast sampling (its public code and paper): per block, exploration steps estimate a stable span end, then a
fast phase commits the span; presets ``code`` (the defaults), ``paper`` and ``dream`` (``SLOWFAST_PRESETS``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.caches.base import CACHES
from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.policies.base import PolicyBase, blocked_bounds, register, span_mask
from dllm_bench.decoding.rules.base import RULES, StepContext, rule_tokens

# SlowFast settings as changes to SlowFastPolicy's defaults (the public code's, preset "code"); the one source of
# the presets: conf/policy/slowfast_<preset>.yaml selects one (runner/group_defaults).
SLOWFAST_PRESETS = {
    "code": {},
    "paper": dict(explore_steps=8, converge_threshold=0.1, threshold=0.85),  # the paper's section 4.2
    "dream": dict(converge_threshold=0.1, explore_threshold=0.8, flavour="dream"),
}


@dataclass
class SlowFastState:
    """Per-row progress of ``SlowFastPolicy`` over the batch; span bounds are offsets inside the current block.

    A sub-cycle explores from ``span_start`` until ``span_end`` is determined, then runs the fast phase on
    [span_start, span_end); a full span starts the next sub-cycle (span_start = span_end) or the next block.
    """

    block_length: int
    num_blocks: int
    block: torch.Tensor  # [B] long, index of the current block
    span_start: torch.Tensor  # [B] long, first position of the current span
    span_end: torch.Tensor  # [B] long, end of the current span (block_length until estimated)
    fast: torch.Tensor  # [B] bool, in the fast phase
    explored: torch.Tensor  # [B] long, exploration steps taken in this sub-cycle
    fast_calls: torch.Tensor  # [B] long, fast-phase steps taken in this sub-cycle
    determined: torch.Tensor  # [B] bool, span end frozen
    end_estimates: torch.Tensor  # [B, stability_window] float64, recent span-end estimates
    estimates_held: torch.Tensor  # [B] long, how many of ``end_estimates`` are filled (llada flavour)


@register
@dataclass(frozen=True)
class SlowFastPolicy(PolicyBase):
    """SlowFast sampling: per block, K exploration steps estimate a stable span end, then a fast phase.

    Exploration commits every candidate >= ``explore_threshold`` when at least ``min_parallel`` qualify (else
    the top-1) and estimates span_end = span_start + 1 + offset of the farthest candidate >= ``converge_threshold``.
    The span is frozen when the estimate window is stable, else int(mean) after K steps. The fast phase
    commits candidates >= ``threshold`` on [span_start, span_end) (top-1 fallback) until the span is full; an
    adaptive rule passed to ``decide`` (a config ``rule``) commits the fast phase instead.
    ``flavour='dream'``: window pre-filled with zeros, unbiased variance <= threshold, round(mean), and
    exploration stops early once nothing is masked. ``truncate_fast`` reproduces the published fast phase
    that runs the network on the canvas cut at the span end after its first call.
    """

    explore_steps: int = 6
    converge_threshold: float = 0.3
    stability_window: int = 2
    stability_threshold: float = 1.0
    threshold: float = 0.9
    explore_threshold: float | None = None
    min_parallel: int = 2
    flavour: str = "llada"
    truncate_fast: bool = False
    name: ClassVar[str] = "slowfast"
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = SLOWFAST_PRESETS
    default_preset: ClassVar[str | None] = "code"
    sync_budget: ClassVar[int] = 5  # its phases read more than the engine (scripts/count_syncs.py measures it)


    def check(self) -> None:
        if self.explore_steps < 1 or self.stability_window < 1:
            raise ValueError(f"slowfast explore_steps and stability_window must be >= 1, got {self}")
        for tau_name in ("converge_threshold", "threshold"):
            if not 0 <= getattr(self, tau_name) <= 1:
                raise ValueError(f"slowfast {tau_name} must be in [0, 1], got {getattr(self, tau_name)}")
        if self.flavour not in ("llada", "dream"):
            raise ValueError(f"slowfast flavour {self.flavour!r} is not one of llada, dream")

    def refuse_rule(self, rule: Any) -> str | None:
        if rule is not None and not rule.adaptive:
            adaptive = ", ".join(n for n, cls in sorted(RULES.items()) if cls.adaptive)
            return (f"policy 'slowfast' takes an adaptive rule for its fast phase ({adaptive}) "
                    f"or none (its own threshold rule), got {rule.name!r}")
        if rule is not None and rule.measure != "top1_prob":
            return (f"policy 'slowfast' explores by top-1 probability (converge_threshold, explore_threshold), so "
                    f"its fast "
                    f"phase's rule must rank by it too; rule {rule.name!r} ranks by {rule.measure!r}")
        return None

    def refuse_lengths(self, gen_length: int, block_length: int) -> str | None:
        if self.flavour == "dream" and block_length != gen_length:
            return f"slowfast flavour 'dream' has no blocks: block_length {block_length} must equal gen_length"
        return None

    def refuse_cache(self, cache: Any) -> str | None:
        if self.truncate_fast and not cache.shorter_canvas:
            allowed = " or ".join(repr(n) for n, cls in CACHES.items() if cls.shorter_canvas and not cls.stateless
                                and not cls.model_switches)  # a block-causal model's cache: not SlowFast's models
            return (f"slowfast truncate_fast (published fast phase) runs without a cache or with {allowed}, got "
                    f"{cache.name!r}")
        return None

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> SlowFastState:
        z = torch.zeros(batch, dtype=torch.long, device=device)
        return SlowFastState(
            block_length=block_length,
            num_blocks=gen_length // block_length,
            block=z.clone(),
            span_start=z.clone(),
            span_end=torch.full_like(z, block_length),
            fast=torch.zeros(batch, dtype=torch.bool, device=device),
            explored=z.clone(),
            fast_calls=z.clone(),
            determined=torch.zeros(batch, dtype=torch.bool, device=device),
            end_estimates=torch.zeros(batch, self.stability_window, dtype=torch.float64, device=device),
            estimates_held=z.clone(),
        )

    def block(self, state: SlowFastState) -> tuple[torch.Tensor, torch.Tensor]:
        return blocked_bounds(state)

    def window_span(self, state: SlowFastState) -> tuple[torch.Tensor, torch.Tensor]:
        """Candidate span: [span_start, block end) while exploring, [span_start, span_end) in the fast phase."""
        lo, hi = self.block(state)
        return lo + state.span_start, torch.where(state.fast, lo + state.span_end, hi)

    def window(self, state: SlowFastState) -> tuple[torch.Tensor, torch.Tensor]:
        return self.window_span(state)

    def canvas_limit(self, state: SlowFastState) -> torch.Tensor | None:
        """Answer length the network sees per row (published fast phase); None = whole canvas."""
        if not self.truncate_fast:
            return None
        lo, hi = self.block(state)
        G = state.num_blocks * state.block_length
        cut = state.fast & (state.fast_calls > 0)
        return torch.where(cut, lo + state.span_end, torch.full_like(lo, G))

    def _estimate(self, state: SlowFastState, ctx: StepContext) -> None:
        """Push this step's span-end estimate and freeze the end when the window is stable."""
        lo, _ = self.window_span(state)
        G = ctx.candidates.shape[1]
        j = torch.arange(G, device=lo.device).unsqueeze(0)
        above = ctx.candidates & (ctx.confidence >= self.converge_threshold)
        farthest = torch.where(above, j, -1).max(dim=1).values
        inc = torch.where(farthest >= 0, farthest - lo + 1, 1)
        est = (state.span_start + inc).clamp(1, state.block_length)
        open_rows = (~state.determined) & (~state.fast)
        last_step = state.explored >= self.explore_steps - 1
        hist = state.end_estimates
        if self.flavour == "dream":
            slot = (state.explored % self.stability_window).unsqueeze(1)
            pushed = hist.scatter(1, slot, est.to(hist.dtype).unsqueeze(1))
            stable = pushed.var(dim=1, unbiased=True) <= self.stability_threshold if self.stability_window >= 2 else torch.ones_like(open_rows)
            fallback = pushed.mean(dim=1).round().clamp_min(1).long()
            full = torch.ones_like(open_rows)
        else:
            pushed = torch.cat([hist[:, 1:], est.to(hist.dtype).unsqueeze(1)], dim=1)
            n = (state.estimates_held + 1).clamp(max=self.stability_window)
            full = n >= self.stability_window
            stable = pushed.std(dim=1, unbiased=False) < self.stability_threshold
            fallback = pushed.mean(dim=1).long()
            state.estimates_held = torch.where(open_rows, n, state.estimates_held)
        state.end_estimates = torch.where(open_rows.unsqueeze(1), pushed, hist)
        new_end = torch.where(stable, est, fallback).clamp(1, state.block_length)
        update = open_rows & full
        state.span_end = torch.where(update, new_end, state.span_end)
        state.determined |= update & (stable | last_step)

    def decide(self, state: SlowFastState, ctx: StepContext, rule) -> tuple[torch.Tensor, torch.Tensor]:
        self._estimate(state, ctx)
        explore = self.explore_threshold if self.explore_threshold is not None else self.threshold
        tau = torch.where(state.fast, self.threshold, explore)
        qualifying = ctx.candidates & (ctx.confidence >= tau.to(ctx.confidence.dtype).unsqueeze(1))
        parallel = qualifying.sum(dim=1) >= self.min_parallel
        top1 = topk_commit_mask(ctx.confidence, ctx.candidates, 1)
        commit, tokens = torch.where(parallel.unsqueeze(1), qualifying, top1), ctx.prediction
        if rule is not None and bool(state.fast.any()):  # a rule replaces the threshold fast-phase commit
            fast = state.fast.unsqueeze(1)
            rule_commit, written = rule.commit(ctx), rule_tokens(rule, ctx)
            commit, tokens = torch.where(fast, rule_commit, commit), torch.where(fast, written, tokens)
        return commit, tokens

    def _fallback_end(self, state: SlowFastState) -> torch.Tensor:
        """End after K undetermined steps: int(mean) of the estimates (block_length // 2 if none)."""
        n = state.estimates_held
        W = self.stability_window
        idx = torch.arange(W, device=n.device).unsqueeze(0)
        valid = idx >= (W - n).unsqueeze(1)
        mean = (state.end_estimates * valid).sum(dim=1) / n.clamp(min=1)
        return torch.where(n > 0, mean.long().clamp(1, state.block_length), torch.full_like(n, state.block_length // 2))

    def advance(self, state: SlowFastState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        G = masked.shape[1]
        block_lo, block_hi = self.block(state)
        exploring = active & ~state.fast
        state.explored += exploring.long()
        state.fast_calls += (active & state.fast).long()
        explore_over = exploring & (state.explored >= self.explore_steps)
        if self.flavour == "dream":
            explore_over |= exploring & ~masked.any(dim=1)
        else:
            undetermined = explore_over & ~state.determined
            state.span_end = torch.where(undetermined, self._fallback_end(state), state.span_end)
        state.fast |= explore_over
        span_lo, span_hi = block_lo + state.span_start, block_lo + state.span_end
        span_done = active & state.fast & ~(masked & span_mask(span_lo, span_hi, G)).any(dim=1)
        state.span_start = torch.where(span_done, state.span_end, state.span_start)
        block_done = span_done & ~(masked & span_mask(block_lo, block_hi, G)).any(dim=1)
        state.block += block_done.long()
        state.span_start = torch.where(block_done, 0, state.span_start)
        state.span_end = torch.where(block_done, state.block_length, state.span_end)
        # a new sub-cycle (same or next block) starts a fresh exploration
        state.explored = torch.where(span_done, 0, state.explored)
        state.fast_calls = torch.where(span_done, 0, state.fast_calls)
        state.estimates_held = torch.where(span_done, 0, state.estimates_held)
        state.end_estimates = torch.where(span_done.unsqueeze(1), 0.0, state.end_estimates)
        state.determined &= ~span_done
        state.fast &= ~span_done
        return state.block >= state.num_blocks
