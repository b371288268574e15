"""KLASS (KL-adaptive stability sampling): commit every masked token of the block whose distribution has stopped
moving (its last ``history_length`` KL divergences between consecutive steps all below ``kl_threshold``) and whose
confidence exceeds ``threshold``; a step with none commits the single most confident candidate.

Published code: shkim0116/KLASS ``src/model/llada_klass.py`` ``stable_confident_decode`` (alg ``klass``, unmask
strategy ``all``) and ``src/model/dream_klass.py`` (alg ``klass``). Per position and forward: p_t = softmax of the
float64 logits, KL_t = sum_v p_t (log(p_t + 1e-12) - log(p_{t-1} + 1e-12)) with p before the first forward = 0; the
last H KLs are kept. LLaDA's loop counts stability only from the block's step H - 1 on (a step counter reset per
block); a position's first KL in its block compares with the previous block's last forward, so the rule also reads
the next block's logits (``watch``). The fallback is the top-k of the block schedule: 1 per step with policy
blocks without steps (= the published steps = gen_length), the policy's count with steps (``takes_steps``: a
block ends after its steps or once full, as the published loop breaks); Dream's is the single most confident
masked token. Where we differ with steps < gen_length: a block's last step commits every masked token left
(the published loop leaves them masked for good), and a fallback whose count exceeds the masked tokens left
commits just those (the published top-k then also picks -inf positions and rewrites them, prompt included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register

KL_EPS = 1e-12  # the published log(p + 1e-12)

# the published scripts' settings (scripts/<model>_<task>.sh; all gen_length 256 = steps, H 2; LLaDA block 64,
# Dream no blocks = block_length gen_length, flavour dream)
FLAVOURS = ("llada", "dream")
PRESETS: dict[str, dict] = {
    "llada_gsm8k": {"threshold": 0.6, "kl_threshold": 0.015},
    "llada_math": {"threshold": 0.6, "kl_threshold": 0.01},
    "llada_humaneval": {"threshold": 0.9, "kl_threshold": 0.01},
    "llada_mbpp": {"threshold": 0.7, "kl_threshold": 0.01},
    "dream_gsm8k": {"threshold": 0.9, "kl_threshold": 0.001, "flavour": "dream"},
    "dream_math": {"threshold": 0.9, "kl_threshold": 0.005, "flavour": "dream"},
    "dream_humaneval": {"threshold": 0.8, "kl_threshold": 0.001, "flavour": "dream"},
    "dream_mbpp": {"threshold": 0.9, "kl_threshold": 0.001, "flavour": "dream"},
}


@dataclass
class KlassState:
    """Per row: the last distribution and the last ``history_length`` KLs of every position of the current and
    the next block, kept in ``slots`` slots (position % slots: the two blocks never share a slot), the block the
    row is in and the steps taken in it."""

    slots: int
    block_lo: torch.Tensor  # [B] long, -1 before the first step
    block_step: torch.Tensor  # [B] long
    history: torch.Tensor  # [B, slots, H] float64
    previous: torch.Tensor | None = None  # [B, slots, V] float64 (allocated at the first forward, when V is known)
    # flavour dream: the token (argmax of the softmax in the logits' dtype), its float64 probability and its
    # probability in the logits' dtype (the fallback's ranking) per slot
    choice: torch.Tensor | None = None
    choice_prob: torch.Tensor | None = None
    choice_rank: torch.Tensor | None = None


@register
@dataclass(frozen=True)
class KLASS(RuleBase):
    """KLASS at LLaDA GSM8K's published setting (c 0.6, kappa 0.015, H 2; block 64). ``PRESETS`` holds the rest."""

    threshold: float = 0.6
    kl_threshold: float = 0.015
    history_length: int = 2
    flavour: str = "llada"  # which published loop: llada_klass.py or dream_klass.py (see ``commit``)
    name: ClassVar[str] = "klass"
    takes_steps: ClassVar[bool] = True

    def check(self) -> None:
        if not 0 <= self.threshold <= 1:
            raise ValueError(f"klass threshold must be in [0, 1], got {self.threshold}")
        if not self.kl_threshold > 0:
            raise ValueError(f"klass kl_threshold must be > 0 (nats), got {self.kl_threshold}")
        if self.flavour not in FLAVOURS:
            raise ValueError(f"klass flavour must be one of {FLAVOURS}, got {self.flavour!r}")
        if self.history_length < 1:
            raise ValueError(f"klass history_length must be >= 1, got {self.history_length}")

    def check_combination(self, *, policy, cache, gen_length: int, block_length: int) -> None:
        if getattr(policy, "name", None) != "blocks":
            raise ValueError(f"rule 'klass' counts its steps per block of policy 'blocks' (KLASS's loop), got "
                             f"policy {policy.name!r}")
        if self.flavour == "dream" and getattr(policy, "steps", None) is not None:
            raise ValueError(f"rule 'klass' flavour 'dream' runs dream_klass.py's steps = gen_length (policy blocks "
                             f"without steps), got steps={policy.steps}")
        if getattr(cache, "name", None) == "dual":
            raise ValueError("rule 'klass' reads the next block's distributions every step; cache 'dual' computes "
                             "only the current block (use cache none, prefix or dllm)")

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> KlassState:
        slots = min(2 * block_length, gen_length)
        return KlassState(slots, torch.full((batch,), -1, dtype=torch.long, device=device),
                          torch.zeros(batch, dtype=torch.long, device=device),
                          torch.zeros(batch, slots, self.history_length, dtype=torch.float64, device=device))

    def watch(self, state: KlassState, masked: torch.Tensor, block_lo: torch.Tensor) -> torch.Tensor:
        """Masked positions whose logits the rule reads beyond the candidates: the current and the next block."""
        j = torch.arange(masked.shape[1], device=masked.device).unsqueeze(0)
        lo = block_lo.unsqueeze(1)
        return masked & (j >= lo) & (j < lo + state.slots)

    def read(self, state: KlassState, candidates: torch.Tensor, masked: torch.Tensor, active: torch.Tensor,
             block_lo: torch.Tensor) -> torch.Tensor:
        """The candidates and the positions it watches (their logits feed its KL history only)."""
        return candidates | self.watch(state, masked & active.unsqueeze(1), block_lo)

    def fuse_logits(self, state: KlassState, logits: torch.Tensor, row: torch.Tensor, position: torch.Tensor,
                    block_lo: torch.Tensor) -> torch.Tensor:
        """Record the KL of each read position (rows ``row``, answer positions ``position``); logits unchanged."""
        p = torch.softmax(logits.to(torch.float64), dim=-1)
        if state.previous is None:
            state.previous = torch.zeros(*state.history.shape[:2], p.shape[-1], dtype=torch.float64,
                                         device=p.device)
        slot = position % state.slots
        before = state.previous[row, slot]
        kl = (p * (torch.log(p + KL_EPS) - torch.log(before + KL_EPS))).sum(dim=-1)
        state.history[row, slot] = torch.cat([state.history[row, slot, 1:], kl.unsqueeze(1)], dim=1)
        state.previous[row, slot] = p
        if self.flavour == "dream":
            if state.choice is None:
                shape = state.history.shape[:2]
                state.choice = torch.zeros(shape, dtype=torch.long, device=p.device)
                state.choice_prob = torch.zeros(shape, dtype=torch.float64, device=p.device)
                state.choice_rank = torch.zeros(shape, dtype=torch.float64, device=p.device)
            rank, choice = torch.softmax(logits, dim=-1).max(dim=-1)
            state.choice[row, slot] = choice
            state.choice_prob[row, slot] = p.gather(1, choice.unsqueeze(1)).squeeze(1)
            state.choice_rank[row, slot] = rank.to(torch.float64)
        return logits

    def _dream_view(self, ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """Variant dream's (token, float64 probability, logits-dtype probability) per answer position."""
        state: KlassState | None = ctx.state
        if self.flavour != "dream" or state is None or state.choice is None:
            return None
        slot = torch.arange(ctx.candidates.shape[1], device=ctx.candidates.device) % state.slots
        return state.choice[:, slot], state.choice_prob[:, slot], state.choice_rank[:, slot]

    def tokens(self, ctx: StepContext) -> torch.Tensor:
        """Variant llada: the predictions; dream: the argmax of the softmax in the logits' dtype (ties: lowest id)."""
        view = self._dream_view(ctx)
        return ctx.prediction if view is None else torch.where(ctx.candidates, view[0], ctx.prediction)

    def commit(self, ctx: StepContext) -> torch.Tensor:
        """Ready = candidate, stable and sure (llada: p > c, dream: p >= c); none ready: the policy's count (1
        without steps) of the most confident candidates (dream: ranked by the probability in the logits' dtype,
        ties to the lowest position); a fixed-step block's last step: every candidate."""
        conf, cand = ctx.confidence, ctx.candidates
        view = self._dream_view(ctx)
        if view is not None:
            conf = torch.where(cand, view[1], conf)
        count = 1 if ctx.quota is None else ctx.quota
        fallback = topk_commit_mask(conf if view is None else torch.where(cand, view[2], ctx.confidence), cand, count)
        if ctx.last_step is not None:
            fallback = torch.where(ctx.last_step.unsqueeze(1), cand, fallback)
        state: KlassState | None = ctx.state
        if state is None:  # no distributions seen: nothing is stable yet
            return fallback
        block_lo = ctx.block[0]
        fresh = block_lo != state.block_lo
        state.block_step = torch.where(fresh, 0, state.block_step + 1)
        state.block_lo = block_lo.clone()
        G = conf.shape[1]
        slot = torch.arange(G, device=conf.device) % state.slots
        stable = (state.history[:, slot] < self.kl_threshold).all(dim=-1)
        stable &= (state.block_step >= self.history_length - 1).unsqueeze(1)
        sure = conf >= self.threshold if self.flavour == "dream" else conf > self.threshold
        ready = cand & stable & sure
        if ctx.last_step is not None:
            ready = torch.where(ctx.last_step.unsqueeze(1), cand, ready)
        return torch.where(ready.any(dim=1, keepdim=True), ready, fallback)
