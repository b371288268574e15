"""Dream's own ``diffusion_generate``: exactly ``steps`` forwards over the whole answer, no blocks, each committing
the timestep schedule's count ranked by its ``alg``; its own rule (rule none)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.policies.base import PolicyBase, is_positive_int, register
from dllm_bench.decoding.rules.base import StepContext
from dllm_bench.decoding.schedules import dream_step_ratios, dream_transfer_count, dream_transfer_probability

DREAM_ALGORITHMS = {"origin": "random", "maskgit_plus": "top1_prob", "topk_margin": "margin", "entropy": "neg_entropy"}


@dataclass
class DreamState:
    """Per-row forward count of ``DreamPolicy`` ([B] long); the window is always the whole answer."""

    gen_length: int
    step: torch.Tensor  # forwards taken
    ratios: torch.Tensor | None = None  # [steps] 1 - s/t per step, on the rows' device (dream_step_ratios)


@register
@dataclass(frozen=True)
class DreamPolicy(PolicyBase):
    """Dream's ``diffusion_generate``: exactly ``steps`` forwards over the whole answer, no blocks.

    Step i commits int(#mask * (1 - s/t)) by the algorithm's confidence (all remaining at the last step);
    ``origin`` instead commits each masked position with probability 1 - s/t.
    """

    steps: int | None  # required: None is refused by ``check`` (the config's null means "give it")
    alg: str = "maskgit_plus"
    eps: float = 1e-3
    name: ClassVar[str] = "dream"
    sync_budget: ClassVar[int] = 5  # its schedule reads more than the engine (scripts/count_syncs.py measures it)
    flavours: ClassVar[tuple[str, ...]] = ("dream",)

    @property
    def measure(self) -> str:
        return DREAM_ALGORITHMS[self.alg]

    def check(self) -> None:
        if self.alg not in DREAM_ALGORITHMS:
            raise ValueError(f"dream alg {self.alg!r} is not one of {', '.join(DREAM_ALGORITHMS)}")
        if not is_positive_int(self.steps):
            raise ValueError(f"dream steps must be an integer >= 1 (Dream runs a fixed number of steps), got {self.steps}")

    def check_measure(self, given: str) -> None:
        if given != self.measure:
            raise ValueError(f"dream alg {self.alg!r} uses confidence {self.measure!r}, got {given!r}")

    def refuse_rule(self, rule: Any) -> str | None:
        if rule is not None:
            return (f"policy 'dream' commits its timestep schedule's count ranked by its alg, so rule must be none, got "
                    f"{rule.name!r} (an adaptive rule on Dream's whole canvas: policy blocks with block_length = "
                    "gen_length)")
        return None

    def refuse_lengths(self, gen_length: int, block_length: int) -> str | None:
        if block_length != gen_length:
            return f"policy 'dream' has no blocks: block_length {block_length} must equal gen_length {gen_length}"
        return None

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> DreamState:
        return DreamState(gen_length, step=torch.zeros(batch, dtype=torch.long, device=device),
                          ratios=dream_step_ratios(self.steps, self.eps, device))

    def block(self, state: DreamState) -> tuple[torch.Tensor, torch.Tensor]:
        lo = torch.zeros_like(state.step)
        return lo, lo + state.gen_length

    def decide(self, state: DreamState, ctx: StepContext, rule) -> tuple[torch.Tensor, torch.Tensor]:
        if self.alg == "origin":
            p = dream_transfer_probability(state.step, self.steps, self.eps, state.ratios).to(ctx.confidence.dtype)
            return ctx.candidates & (ctx.confidence < p.unsqueeze(1)), ctx.prediction
        k = dream_transfer_count(ctx.masked.sum(dim=1), state.step, self.steps, self.eps, state.ratios)
        return topk_commit_mask(ctx.confidence, ctx.candidates, k), ctx.prediction

    def advance(self, state: DreamState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        state.step += active.long()
        return state.step >= self.steps
