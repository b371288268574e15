"""Fast-dLLM's Dream ``confidence_threshold`` loop (its ``generation_utils.py``): the whole answer, a per-step slot
budget filled by the top one and every offered slot >= threshold, extra steps until no mask is left; its own rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.commit_masks import threshold_count, topk_commit_mask
from dllm_bench.decoding.policies.base import PolicyBase, is_positive_int, register
from dllm_bench.decoding.rules.base import StepContext


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


@register
@dataclass(frozen=True)
class DreamThresholdPolicy(PolicyBase):
    """Fast-dLLM's Dream ``confidence_threshold``: whole answer, no blocks, a per-step slot budget.

    Step i offers ``gen_length // steps`` slots plus those left empty by step i-1 to the most confident
    masked positions and fills the top one and every other offered one with confidence >= ``threshold``. When the
    last planned step (or an overtime step) leaves a slot empty the quota drops to 0 and one more step is
    added, so NFE = steps + overtime steps and nothing stays masked.
    """

    steps: int | None  # required: None is refused by ``check`` (the config's null means "give it")
    threshold: float = 0.9
    name: ClassVar[str] = "dream_threshold"
    sync_budget: ClassVar[int] = 5  # its slot budget reads more than the engine (scripts/count_syncs.py measures it)
    flavours: ClassVar[tuple[str, ...]] = ("dream",)
    measure: ClassVar[str] = "top1_prob"

    def check(self) -> None:
        if not is_positive_int(self.steps):
            raise ValueError(f"dream_threshold steps must be an integer >= 1 dividing gen_length, got {self.steps!r}")
        threshold = self.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
            raise ValueError(f"dream_threshold threshold must be a number in (0, 1], got {self.threshold!r}")

    # what Fast-dLLM's Dream ``confidence_threshold`` loop never ran
    def refuse_rule(self, rule: Any) -> str | None:
        if rule is not None:
            return (f"policy 'dream_threshold' has its own commit rule (top-1 plus every slot >= threshold); "
                    f"rule must be None, got {rule.name!r}")
        return None

    def refuse_lengths(self, gen_length: int, block_length: int) -> str | None:
        if block_length != gen_length:
            return (f"policy 'dream_threshold' has no blocks (the published loop decodes the whole answer): "
                    f"block_length {block_length} must equal gen_length {gen_length}")
        if gen_length % self.steps:
            return (f"dream_threshold steps {self.steps} must divide gen_length {gen_length} "
                    f"(the published loop asserts it: the per-step quota is gen_length / steps)")
        return None

    def refuse_cache(self, cache: Any) -> str | None:
        if not cache.stateless:
            return (f"policy 'dream_threshold' runs only without a cache, got {cache.name!r}: the published "
                    f"cached Dream runs are the blocked loop (policy blocks, threshold, prefix/dual cache with "
                    f"compat_first_token)")
        return None

    def refuse_cfg(self, cfg_scale: float) -> str | None:
        if cfg_scale != 0:
            return (f"policy 'dream_threshold' has no classifier-free guidance (Dream's loop has none), "
                    f"got cfg_scale {cfg_scale}")
        return None

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> DreamThresholdState:
        def full(value: int) -> torch.Tensor:
            return torch.full((batch,), value, dtype=torch.long, device=device)

        return DreamThresholdState(gen_length, quota=full(gen_length // self.steps), carry=full(0), step=full(0),
                                   planned=full(self.steps), unfilled=full(0))

    def block(self, state: DreamThresholdState) -> tuple[torch.Tensor, torch.Tensor]:
        lo = torch.zeros_like(state.step)
        return lo, lo + state.gen_length

    def decide(self, state: DreamThresholdState, ctx: StepContext, rule) -> tuple[torch.Tensor, torch.Tensor]:
        slots = state.quota + state.carry
        count = threshold_count(ctx.confidence, ctx.candidates, self.threshold).minimum(slots).clamp(min=1)
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
