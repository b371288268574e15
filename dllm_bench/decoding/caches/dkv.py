"""dKV-Cache-Decode (horseee/dKV-Cache): a token's K/V enter the cache one step after it is decoded; what was still
masked at the start of the previous step is recomputed; the whole canvas is refreshed every ``refresh_every`` steps.
Two published loops, picked by the model's flavour: LLaDA's blocks (``generation_utils/llada_dkv_cache_decode.py``)
and Dream's ``diffusion_generate`` with ``cache_type='decoded'``, ``shift_type='un'``
(``generation_utils/dream_generation_utils.py``, ``generation_utils/cache_utils.py`` ``DynamicCache``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.caches.base import (
    CacheBase,
    Canvas,
    Cohort,
    Forward,
    HostView,
    StepRows,
    ascending_positions,
    register,
)
from dllm_bench.models.cache.kv import QueriesFirstKVCache

# the remasking rules the published loop runs (topk's remasking names)
REMASKING = ("low_confidence", "random")


@register
@dataclass(frozen=True)
class DKVCache(CacheBase):
    """dKV-Cache-Decode. LLaDA: step i of a block (from 0) is a full forward when i < 2 or i % ``refresh_every`` == 0
    (the published ``cache_reloading_step``; 1 = always full); otherwise its queries are the answer positions masked
    at the start of the previous step (those masked now and those the previous step decoded, whose K/V enter the
    cache here), against the K/V stored for the rest. Dream (shifted logits: position j predicts j + 1): step i is
    full when i % ``refresh_every`` == 0 (``cache_steps``); otherwise its queries are the positions j whose next
    position j + 1 was masked at the start of step i - 1, and at step 1 also the canvas's last position."""

    refresh_every: int = 8  # the README's LLaDA example; its presets 4, 8 and 16 are conf/cache/dkv*.yaml
    name: ClassVar[str] = "dkv"
    # the loop each model flavour ran with the cache in the published code
    loops: ClassVar[dict[str, str]] = {"llada": "blocks", "dream": "dream"}

    def check(self) -> None:
        if self.refresh_every < 1:
            raise ValueError(f"dkv refresh_every must be >= 1 (1 = every step a full forward), got {self.refresh_every}")

    @classmethod
    def check_flavour(cls, flavour: str, policy_name: str) -> None:
        super().check_flavour(flavour, policy_name)
        loop = cls.loops.get(flavour)
        if loop is not None and policy_name != loop:
            raise ValueError(f"cache 'dkv' runs on {flavour} models with policy {loop!r} (the published {flavour} "
                             f"loop), got policy {policy_name!r}")

    def check_combination(self, *, policy: Any, rule: Any, gen_length: int, block_length: int) -> None:
        name = getattr(policy, "name", None)
        if name == "dream" and rule is None:
            return
        if name != "blocks" or getattr(rule, "name", None) != "topk":
            raise ValueError(f"cache 'dkv' runs as published only with policy 'blocks' (steps) and rule 'topk' (its "
                             f"fixed count per step; LLaDA) or policy 'dream' without a rule (Dream), got policy "
                             f"{name!r} and rule {getattr(rule, 'name', None)!r}")
        if rule.remasking not in REMASKING:
            raise ValueError(f"cache 'dkv' runs with topk remasking {' or '.join(REMASKING)} (the published loop "
                             f"raises on others), got {rule.remasking!r}")

    def session(self, canvas: Canvas) -> DKVSession:
        return DKVSession(self, canvas)


@dataclass
class _BlockState:
    """A cohort's record of the previous step: its answer mask at that step's start ([b, G] on the device) and the
    masked count per row (host)."""

    masked: torch.Tensor | None = None
    counts: list[int] | None = None


class DKVSession:
    """Rows in cohorts by block (a new block starts a new storage). Forward positions: a full forward counts the
    real prompt and the answer, a cached step the queries of each row."""

    def __init__(self, cache: DKVCache, canvas: Canvas) -> None:
        self.cache, self.canvas = cache, canvas
        self.cohorts: list[tuple[Cohort, _BlockState]] = []

    def forwards(self, view: HostView, rows: StepRows, ids: torch.Tensor) -> Iterator[Forward]:
        if view.masked is None:
            raise ValueError("cache 'dkv' needs the masked counts of the host view")
        active = set(view.rows)
        survivors, covered = [], set()
        for cohort, state in self.cohorts:
            keep = [r in active and (view.block_lo[r], view.block_hi[r]) == cohort.block for r in cohort.host_rows]
            if not cohort.shrink(keep, rows):
                continue
            if state.masked is not None and not all(keep):
                index = torch.tensor([i for i, k in enumerate(keep) if k], dtype=torch.long, device=ids.device)
                state.masked = state.masked.index_select(0, index)
                state.counts = [c for c, k in zip(state.counts, keep) if k] if state.counts is not None else None
            covered.update(cohort.host_rows)
            survivors.append((cohort, state))
            yield self._step(cohort, state, view, ids)
        refresh = [r for r in view.rows if r not in covered]
        for key in sorted({(view.block_lo[r], view.block_hi[r]) for r in refresh}):
            group = [r for r in refresh if (view.block_lo[r], view.block_hi[r]) == key]
            cohort, state = Cohort(rows.device(group), group, QueriesFirstKVCache(), key), _BlockState()
            survivors.append((cohort, state))
            yield self._step(cohort, state, view, ids)
        self.cohorts = survivors

    def _step(self, cohort: Cohort, state: _BlockState, view: HostView, ids: torch.Tensor) -> Forward:
        """Step ``cohort.forwards`` of the block; records this step's mask for the next."""
        P, T = self.canvas.prompt_length, self.canvas.length
        i = cohort.forwards
        masked_now = ids.index_select(0, cohort.rows)[:, P:] == self.canvas.mask_token_id
        dream = self.canvas.shift == 1
        full = i % self.cache.refresh_every == 0 if dream else (i < 2 or i % self.cache.refresh_every == 0)
        if full:
            forward = Forward(cohort.rows, cohort.storage, refresh=True, count=T - P, count_prompt=True)
        elif dream:
            # j is queried where j + 1 was masked (answer position a -> canvas P - 1 + a); the last position at step
            # 1 only (the published first cache_position leaves it out, later ones wrap position 0 onto it)
            query = torch.zeros(len(cohort.host_rows), T, dtype=torch.bool, device=ids.device)
            query[:, P - 1:T - 1] = state.masked
            query[:, T - 1] = i == 1
            forward = self._at(cohort, query, [c + (i == 1) for c in state.counts])
        else:
            answer = torch.zeros(len(cohort.host_rows), P, dtype=torch.bool, device=ids.device)
            forward = self._at(cohort, torch.cat([answer, state.masked], dim=1), state.counts)
        state.masked, state.counts = masked_now, [view.masked[r] for r in cohort.host_rows]
        cohort.forwards += 1
        return forward

    @staticmethod
    def _at(cohort: Cohort, query: torch.Tensor, counts_host: list[int]) -> Forward:
        """A cached forward at the canvas positions where ``query`` [b, T] holds (``counts_host`` per row)."""
        positions, _, counts = ascending_positions(query, max(counts_host))
        return Forward(cohort.rows, cohort.storage, refresh=False, count=counts, positions=positions)
