"""Schedules that drive the selectors: LLaDA blocks, Dream timesteps, SlowFast sampling.

A policy keeps per-row state as tensors over the batch and answers three questions each step: which answer
positions are candidates (``window``), which block a cache should treat as current (``block``), and which
candidates to commit (``decide``); ``advance`` moves every row on after the commit. Positions are answer
coordinates (0 = first generated position).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dllm_bench.decoding.rules.base import StepContext, rule_tokens
from dllm_bench.decoding.schedules import (
    dream_step_ratios,
    dream_transfer_count,
    dream_transfer_probability,
    llada_transfer_counts,
)
from dllm_bench.decoding.selectors import threshold_count, topk_commit_mask


def _span_mask(lo: torch.Tensor, hi: torch.Tensor, length: int) -> torch.Tensor:
    """[B, length] bool: lo[b] <= j < hi[b]."""
    j = torch.arange(length, device=lo.device).unsqueeze(0)
    return (j >= lo.unsqueeze(1)) & (j < hi.unsqueeze(1))


# ---------------------------------------------------------------- LLaDA blocks


@dataclass
class BlockState:
    """Per-row progress of ``BlockPolicy``: the current block and the steps taken in it ([B] long tensors)."""

    block_length: int
    num_blocks: int
    block: torch.Tensor  # index of the current block
    step_in_block: torch.Tensor  # steps taken in the current block
    steps_per_block: int | None = None  # fixed steps per block (None: adaptive, a block runs until full)
    commit_counts: torch.Tensor | None = None  # [steps_per_block] tokens committed at each step of a block
    hold: bool = False  # rows leave a block together, once every active row's is done (the cache's holds_full_blocks)


@dataclass(frozen=True)
class BlockPolicy:
    """LLaDA semi-autoregressive blocks; ``steps`` total fixed steps (top-k) or None (adaptive, until full)."""

    steps: int | None = None
    name: str = field(default="blocks", init=False)

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
        lo = state.block * state.block_length
        return lo, lo + state.block_length

    window = block

    def decide(self, state: BlockState, ctx: StepContext, selector) -> tuple[torch.Tensor, torch.Tensor]:
        k = None
        if self.steps is not None:
            last = state.step_in_block >= state.steps_per_block - 1
            k = state.commit_counts[state.step_in_block.clamp(max=state.steps_per_block - 1)]
            # a block's last step commits whatever is left (e.g. after a refresh forced a single commit), as
            # Dream's published cache loop does; with LLaDA's counts this is exactly the scheduled k
            k = torch.where(last, ctx.candidates.sum(dim=1), k)
            ctx.last_step = last
        ctx.quota = k
        return selector.commit(ctx), rule_tokens(selector, ctx)

    def advance(self, state: BlockState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        state.step_in_block += active.long()
        lo, hi = self.block(state)
        full = ~(masked & _span_mask(lo, hi, masked.shape[1])).any(dim=1)
        # fixed steps: a block ends after its steps, or earlier once full (a rule that takes steps may fill it
        # early, as KLASS's loop breaks; a fixed count fills it exactly at its last step)
        done = full if self.steps is None else full | (state.step_in_block >= state.steps_per_block)
        done &= active
        if state.hold:
            done &= (done | ~active).all()
        state.block += done.long()
        state.step_in_block = torch.where(done, 0, state.step_in_block)
        return state.block >= state.num_blocks


@dataclass
class DPadState(BlockState):
    """``BlockState`` plus the rows whose block was completed by the last step, and that block's bounds."""

    completed: torch.Tensor | None = None  # [B] bool
    completed_lo: torch.Tensor | None = None  # [B] long


@dataclass(frozen=True)
class DPadPolicy(BlockPolicy):
    """DPad: LLaDA blocks where each block's forwards see only the suffix masks kept by a Gaussian-shaped draw
    inside ``suffix_window`` (:mod:`dllm_bench.decoding.suffix_dropout`); None = the whole answer.

    ``early_termination``: once a block is complete and holds an EOS, the row ends and the rest of its answer
    is EOS (DPad's check, run at a block's end only). ``rng``: "row" (a generator per row from its seed) or
    "global" (torch's default generator, as DPad's evaluation draws).
    """

    suffix_window: int | None = None
    sigma: float = 4.0
    scale: float = 2.0
    early_termination: bool = True
    rng: str = "row"
    name: str = field(default="dpad", init=False)

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> DPadState:
        base = super().init_state(batch, gen_length, block_length, device)
        return DPadState(**{f: getattr(base, f) for f in base.__dataclass_fields__},
                         completed=torch.zeros(batch, dtype=torch.bool, device=device),
                         completed_lo=torch.zeros(batch, dtype=torch.long, device=device))

    def advance(self, state: DPadState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        before = state.block.clone()
        finished = super().advance(state, masked, active)
        state.completed = state.block != before
        state.completed_lo = before * state.block_length
        return finished

    def terminated(self, state: DPadState, answer: torch.Tensor, eos_id: int) -> torch.Tensor:
        """[B] bool: rows whose block completed by the last step holds ``eos_id`` (False without early
        termination)."""
        if not self.early_termination:
            return torch.zeros_like(state.completed)
        in_block = _span_mask(state.completed_lo, state.completed_lo + state.block_length, answer.shape[1])
        return state.completed & (in_block & (answer == eos_id)).any(dim=1)


# ---------------------------------------------------------------- Dream diffusion_generate


DREAM_ALGORITHMS = {"origin": "random", "maskgit_plus": "top1_prob", "topk_margin": "margin", "entropy": "neg_entropy"}


@dataclass
class DreamState:
    """Per-row forward count of ``DreamPolicy`` ([B] long); the window is always the whole answer."""

    gen_length: int
    step: torch.Tensor  # forwards taken
    ratios: torch.Tensor | None = None  # [steps] 1 - s/t per step, on the rows' device (dream_step_ratios)


@dataclass(frozen=True)
class DreamPolicy:
    """Dream's ``diffusion_generate``: exactly ``steps`` forwards over the whole answer, no blocks.

    Step i commits int(#mask * (1 - s/t)) by the algorithm's confidence (all remaining at the last step);
    ``origin`` instead commits each masked position with probability 1 - s/t.
    """

    steps: int
    alg: str = "maskgit_plus"
    eps: float = 1e-3
    name: str = field(default="dream", init=False)

    @property
    def measure(self) -> str:
        return DREAM_ALGORITHMS[self.alg]

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> DreamState:
        return DreamState(gen_length, step=torch.zeros(batch, dtype=torch.long, device=device),
                          ratios=dream_step_ratios(self.steps, self.eps, device))

    def block(self, state: DreamState) -> tuple[torch.Tensor, torch.Tensor]:
        lo = torch.zeros_like(state.step)
        return lo, lo + state.gen_length

    window = block

    def decide(self, state: DreamState, ctx: StepContext, selector) -> tuple[torch.Tensor, torch.Tensor]:
        if self.alg == "origin":
            p = dream_transfer_probability(state.step, self.steps, self.eps, state.ratios).to(ctx.confidence.dtype)
            return ctx.candidates & (ctx.confidence < p.unsqueeze(1)), ctx.prediction
        k = dream_transfer_count(ctx.masked.sum(dim=1), state.step, self.steps, self.eps, state.ratios)
        return topk_commit_mask(ctx.confidence, ctx.candidates, k), ctx.prediction

    def advance(self, state: DreamState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        state.step += active.long()
        return state.step >= self.steps


# ---------------------------------------------------------------- Fast-dLLM's Dream confidence_threshold


@dataclass
class DreamThresholdState:
    """Per-row slot accounting of ``DreamThresholdPolicy`` (all [B] long tensors).

    A step offers ``quota + carry`` slots to the most confident masked positions; ``unfilled`` (set by
    ``decide``) is how many of them it left empty, the next step's carry. Invariant: masks left =
    quota * (planned - step) + carry, so every offered slot holds a masked position and the loop ends with
    none left.
    """

    gen_length: int
    quota: torch.Tensor  # gen_length // steps; 0 once the planned steps are spent
    carry: torch.Tensor  # slots the previous step left empty
    step: torch.Tensor  # forwards taken
    planned: torch.Tensor  # steps, plus one for every overtime step that still left a slot empty
    unfilled: torch.Tensor  # slots this step leaves empty


@dataclass(frozen=True)
class DreamThresholdPolicy:
    """Fast-dLLM's Dream ``confidence_threshold``: whole answer, no blocks, a per-step slot budget.

    Step i offers ``gen_length // steps`` slots plus those left empty by step i-1 to the most confident
    masked positions and fills the top one and every other offered one with confidence >= ``tau``. When the
    last planned step (or an overtime step) leaves a slot empty the quota drops to 0 and one more step is
    added, so NFE = steps + overtime steps and nothing stays masked.
    """

    steps: int
    tau: float = 0.9
    name: str = field(default="dream_threshold", init=False)
    measure = "top1_prob"

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> DreamThresholdState:
        def full(value: int) -> torch.Tensor:
            return torch.full((batch,), value, dtype=torch.long, device=device)

        return DreamThresholdState(gen_length, quota=full(gen_length // self.steps), carry=full(0), step=full(0),
                                   planned=full(self.steps), unfilled=full(0))

    def block(self, state: DreamThresholdState) -> tuple[torch.Tensor, torch.Tensor]:
        lo = torch.zeros_like(state.step)
        return lo, lo + state.gen_length

    window = block

    def decide(self, state: DreamThresholdState, ctx: StepContext, selector) -> tuple[torch.Tensor, torch.Tensor]:
        slots = state.quota + state.carry
        count = threshold_count(ctx.confidence, ctx.candidates, self.tau).minimum(slots).clamp(min=1)
        count = count.minimum(ctx.candidates.sum(dim=1))
        state.unfilled = slots - count
        return topk_commit_mask(ctx.confidence, ctx.candidates, count), ctx.prediction

    def advance(self, state: DreamThresholdState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        overtime = active & (state.step >= state.planned - 1) & (state.unfilled > 0)
        state.planned = state.planned + overtime.long()
        state.quota = torch.where(overtime, 0, state.quota)
        state.carry = torch.where(active, state.unfilled, state.carry)
        state.step = state.step + active.long()
        return state.step >= state.planned


# ---------------------------------------------------------------- SlowFast sampling


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
    estimates_held: torch.Tensor  # [B] long, how many of ``end_estimates`` are filled (llada variant)


@dataclass(frozen=True)
class SlowFastPolicy:
    """SlowFast sampling: per block, K exploration steps estimate a stable span end, then a fast phase.

    Exploration commits every candidate >= ``explore_tau`` when at least ``min_parallel`` qualify (else
    the top-1) and estimates span_end = span_start + 1 + offset of the farthest candidate >= ``tau_min``.
    The span is frozen when the estimate window is stable, else int(mean) after K steps. The fast phase
    commits candidates >= ``tau_high`` on [span_start, span_end) (top-1 fallback) until the span is full; an
    adaptive selector passed to ``decide`` (a config ``rule``) commits the fast phase instead.
    ``variant='dream'``: window pre-filled with zeros, unbiased variance <= threshold, round(mean), and
    exploration stops early once nothing is masked. ``truncate_fast`` reproduces the published fast phase
    that runs the network on the canvas cut at the span end after its first call.
    """

    explore_steps: int = 6
    tau_min: float = 0.3
    stability_window: int = 2
    stability_threshold: float = 1.0
    tau_high: float = 0.9
    explore_tau: float | None = None
    min_parallel: int = 2
    variant: str = "llada"
    truncate_fast: bool = False
    name: str = field(default="slowfast", init=False)

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
        lo = state.block * state.block_length
        return lo, lo + state.block_length

    def window_span(self, state: SlowFastState) -> tuple[torch.Tensor, torch.Tensor]:
        """Candidate span: [span_start, block end) while exploring, [span_start, span_end) in the fast phase."""
        lo, hi = self.block(state)
        return lo + state.span_start, torch.where(state.fast, lo + state.span_end, hi)

    window = window_span

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
        above = ctx.candidates & (ctx.confidence >= self.tau_min)
        farthest = torch.where(above, j, -1).max(dim=1).values
        inc = torch.where(farthest >= 0, farthest - lo + 1, 1)
        est = (state.span_start + inc).clamp(1, state.block_length)
        open_rows = (~state.determined) & (~state.fast)
        last_step = state.explored >= self.explore_steps - 1
        hist = state.end_estimates
        if self.variant == "dream":
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

    def decide(self, state: SlowFastState, ctx: StepContext, selector) -> tuple[torch.Tensor, torch.Tensor]:
        self._estimate(state, ctx)
        tau = torch.where(state.fast, self.tau_high, self.explore_tau if self.explore_tau is not None else self.tau_high)
        qualifying = ctx.candidates & (ctx.confidence >= tau.to(ctx.confidence.dtype).unsqueeze(1))
        parallel = qualifying.sum(dim=1) >= self.min_parallel
        top1 = topk_commit_mask(ctx.confidence, ctx.candidates, 1)
        commit, tokens = torch.where(parallel.unsqueeze(1), qualifying, top1), ctx.prediction
        if selector is not None and bool(state.fast.any()):  # a rule replaces the tau_high fast-phase commit
            fast = state.fast.unsqueeze(1)
            rule_commit, written = selector.commit(ctx), rule_tokens(selector, ctx)
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
        if self.variant == "dream":
            explore_over |= exploring & ~masked.any(dim=1)
        else:
            undetermined = explore_over & ~state.determined
            state.span_end = torch.where(undetermined, self._fallback_end(state), state.span_end)
        state.fast |= explore_over
        span_lo, span_hi = block_lo + state.span_start, block_lo + state.span_end
        span_done = active & state.fast & ~(masked & _span_mask(span_lo, span_hi, G)).any(dim=1)
        state.span_start = torch.where(span_done, state.span_end, state.span_start)
        block_done = span_done & ~(masked & _span_mask(block_lo, block_hi, G)).any(dim=1)
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


# SlowFast settings as changes to SlowFastPolicy's defaults (the public code's, preset "code"); the one source of
# the presets: conf/policy/slowfast_<preset>.yaml must agree (tests/decoding/test_defaults_agree.py).
SLOWFAST_PRESETS = {
    "code": {},
    "paper": dict(explore_steps=8, tau_min=0.1, tau_high=0.85),  # the paper's section 4.2
    "dream": dict(tau_min=0.1, explore_tau=0.8, variant="dream"),
}


# ---------------------------------------------------------------- WINO (revokable decoding)

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


@dataclass(frozen=True)
class WinoPolicy:
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
    name: str = field(default="wino", init=False)
    measure = "top1_prob"
    shadow = True  # the engine runs ``shadow_forward`` instead of a cache's forward

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> WinoState:
        z = torch.zeros(batch, dtype=torch.long, device=device)
        return WinoState(block_length, gen_length // block_length, block=z,
                         last_accept=torch.full_like(z, WINO_FIRST_LAST_ACCEPT))

    def block(self, state: WinoState) -> tuple[torch.Tensor, torch.Tensor]:
        lo = state.block * state.block_length
        return lo, lo + state.block_length

    window = block

    def shadow_forward(self, model, x: torch.Tensor, rows: torch.Tensor, state: WinoState, candidates: torch.Tensor,
                       key_mask: torch.Tensor | None, prompt_length: int, mask_token_id: int,
                       prompt_real: torch.Tensor):
        """One forward of ``rows`` over canvas + shadow block: the candidates' logits as a ``ForwardResult``;
        sets ``state.back`` (shadow probability of every decoded block token, float64 softmax)."""
        from dllm_bench.decoding.forward import ForwardResult

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

    def decide(self, state: WinoState, ctx: StepContext, selector) -> tuple[torch.Tensor, torch.Tensor]:
        cand, conf = ctx.candidates, ctx.confidence
        masked_now = cand.sum(dim=1)
        cap = (masked_now.to(torch.float64) * WINO_ACCEPT_RATIO).floor().long()
        cap = cap.clamp(min=WINO_ACCEPT_MIN).clamp(max=WINO_ACCEPT_MAX)
        above = (cand & (conf > self.threshold)).sum(dim=1)
        accept = above.minimum(cap).clamp(min=1).minimum(masked_now)
        commit = topk_commit_mask(conf, cand, accept)
        lo, hi = self.block(state)
        decoded = _span_mask(lo, hi, cand.shape[1]) & ~ctx.masked
        low = decoded & (state.back < self.threshold_back)
        n_low = low.sum(dim=1)
        n_revoke = torch.where(n_low >= state.last_accept, state.last_accept - 1, n_low)
        n_revoke = torch.where(accept > 1, n_revoke, 0)
        state.revoke = topk_commit_mask(-state.back, low, n_revoke)
        state.last_accept = accept
        return commit, ctx.prediction

    def advance(self, state: WinoState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        lo, hi = self.block(state)
        done = active & ~(masked & _span_mask(lo, hi, masked.shape[1])).any(dim=1)
        state.block += done.long()
        state.last_accept = torch.where(done, WINO_FIRST_LAST_ACCEPT, state.last_accept)
        return state.block >= state.num_blocks
