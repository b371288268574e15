"""dKV-Cache-Decode (horseee/dKV-Cache ``generation_utils/llada_dkv_cache_decode.py``): a token's K/V enter the cache
one step after it is decoded; every position still masked at the start of the previous step is recomputed; the
whole canvas is refreshed at a block's first two steps and every ``refresh_every`` steps of a block."""

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
    register,
)
from dllm_bench.models.cache.kv import KVCache

# the remasking rules the published loop runs (topk's remasking names)
REMASKING = ("low_confidence", "random")


@register
@dataclass(frozen=True)
class DKVCache(CacheBase):
    """dKV-Cache-Decode: step i of a block (from 0) is a full forward when i < 2 or i % ``refresh_every`` == 0 (the
    published ``cache_reloading_step``; 1 = always full); otherwise its queries are the answer positions masked at
    the start of the previous step (those masked now and those the previous step decoded, whose K/V enter the cache
    here), against the K/V stored for the rest."""

    refresh_every: int = 8  # the README's LLaDA example; its presets 4, 8 and 16 are conf/cache/dkv*.yaml
    name: ClassVar[str] = "dkv"
    flavours: ClassVar[tuple[str, ...]] = ("llada",)

    def check(self) -> None:
        if self.refresh_every < 1:
            raise ValueError(f"dkv refresh_every must be >= 1 (1 = every step a full forward), got {self.refresh_every}")

    def check_combination(self, *, policy: Any, selector: Any, gen_length: int, block_length: int) -> None:
        if getattr(policy, "name", None) != "blocks" or getattr(selector, "name", None) != "topk":
            raise ValueError(f"cache 'dkv' runs as published only with policy 'blocks' (steps) and rule 'topk' (its "
                             f"fixed count per step), got policy {getattr(policy, 'name', None)!r} and rule "
                             f"{getattr(selector, 'name', None)!r}")
        if selector.remasking not in REMASKING:
            raise ValueError(f"cache 'dkv' runs with topk remasking {' or '.join(REMASKING)} (the published loop "
                             f"raises on others), got {selector.remasking!r}")

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
                state.counts = [c for c, k in zip(state.counts, keep) if k]
            covered.update(cohort.host_rows)
            survivors.append((cohort, state))
            yield self._step(cohort, state, view, ids)
        refresh = [r for r in view.rows if r not in covered]
        for key in sorted({(view.block_lo[r], view.block_hi[r]) for r in refresh}):
            group = [r for r in refresh if (view.block_lo[r], view.block_hi[r]) == key]
            cohort, state = Cohort(rows.device(group), group, KVCache(), key), _BlockState()
            survivors.append((cohort, state))
            yield self._step(cohort, state, view, ids)
        self.cohorts = survivors

    def _step(self, cohort: Cohort, state: _BlockState, view: HostView, ids: torch.Tensor) -> Forward:
        """Step ``cohort.forwards`` of the block; records this step's mask for the next."""
        P, T = self.canvas.prompt_length, self.canvas.length
        i = cohort.forwards
        masked_now = ids.index_select(0, cohort.rows)[:, P:] == self.canvas.mask_token_id
        if i < 2 or i % self.cache.refresh_every == 0:
            forward = Forward(cohort.rows, cohort.storage, refresh=True, count=T - P, count_prompt=True)
        else:
            counts = state.masked.sum(dim=1)
            width = max(state.counts)
            order = torch.sort((~state.masked).to(torch.int8), dim=1, stable=True).indices[:, :width]
            last = order.gather(1, (counts - 1).clamp(min=0).unsqueeze(1))
            j = torch.arange(width, device=order.device).unsqueeze(0)
            positions = torch.where(j < counts.unsqueeze(1), order, last) + P  # a short row repeats its last query
            forward = Forward(cohort.rows, cohort.storage, refresh=False, count=counts, positions=positions)
        state.masked, state.counts = masked_now, [view.masked[r] for r in cohort.host_rows]
        cohort.forwards += 1
        return forward
