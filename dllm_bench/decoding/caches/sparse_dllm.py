"""Sparse-dLLM (OpenMOSS/Sparse-dLLM): per block, two full forwards, then the block against a pruned cache.

A block's first step is a full forward that stores nothing; its second is a full forward that stores, per layer,
the K/V of the ``keep_ratio`` share of the positions outside the block that matter most to the block's queries
(head-mean of mean block query . key, max-pooled over ``kernel_size`` neighbours; storage:
:mod:`dllm_bench.models.cache.pruned`); every later step of the block queries only the block against those.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.caches.base import CacheBase, Canvas, Cohort, Forward, HostView, StepRows, register
from dllm_bench.models.cache.pruned import PrunedKVCache


@register
@dataclass(frozen=True)
class SparseDLLMCache(CacheBase):
    """Sparse-dLLM's dynamic cache eviction; defaults = its published runs (keep 0.5, max-pool kernel 3;
    ``kernel_size`` null = no pooling, its wrapper's default)."""

    keep_ratio: float = 0.5
    kernel_size: int | None = 3
    name: ClassVar[str] = "sparse_dllm"
    flavours: ClassVar[tuple[str, ...]] = ("llada",)

    def check(self) -> None:
        if not 0 < self.keep_ratio <= 1:
            raise ValueError(f"sparse_dllm keep_ratio must be in (0, 1], got {self.keep_ratio}")
        if self.kernel_size is not None and (self.kernel_size < 1 or self.kernel_size % 2 == 0):
            raise ValueError(f"sparse_dllm kernel_size must be an odd integer >= 1 (the pooled scores keep their "
                             f"length) or null, got {self.kernel_size}")

    def check_combination(self, *, policy: Any, rule: Any, gen_length: int, block_length: int) -> None:
        if policy.name != "blocks":
            raise ValueError(f"sparse_dllm prunes per block of the block loop: policy must be 'blocks', got "
                             f"{policy.name!r}")

    def session(self, canvas: Canvas) -> SparseDLLMSession:
        return SparseDLLMSession(self, canvas)


class SparseDLLMSession:
    """Rows in cohorts by block, each with its pruned storage; a row entering a new block starts a new cohort.

    Forward positions: the prompt's real tokens and the answer on a block's two full forwards, the block after."""

    def __init__(self, cache: SparseDLLMCache, canvas: Canvas) -> None:
        self.cache, self.canvas = cache, canvas
        self.cohorts: list[Cohort] = []

    def forwards(self, view: HostView, rows: StepRows, ids: torch.Tensor) -> Iterator[Forward]:
        P, T = self.canvas.prompt_length, self.canvas.length
        active = set(view.rows)
        survivors, covered = [], set()
        for cohort in self.cohorts:
            keep = [r in active and (view.block_lo[r], view.block_hi[r]) == cohort.block for r in cohort.host_rows]
            if not cohort.shrink(keep, rows):
                continue
            covered.update(cohort.host_rows)
            survivors.append(cohort)
            cohort.since_refresh += 1
            if cohort.since_refresh == 2:  # the block's second step: full, and it prunes
                yield Forward(cohort.rows, cohort.storage, refresh=True, count=T - P, count_prompt=True)
            else:
                lo, hi = P + cohort.block[0], P + cohort.block[1]
                yield Forward(cohort.rows, cohort.storage, refresh=False, count=hi - lo, start=lo, end=hi)
        fresh = [r for r in view.rows if r not in covered]
        for key in sorted({(view.block_lo[r], view.block_hi[r]) for r in fresh}):
            group = [r for r in fresh if (view.block_lo[r], view.block_hi[r]) == key]
            storage = PrunedKVCache((P + key[0], P + key[1]), self.cache.keep_ratio, self.cache.kernel_size)
            cohort = Cohort(rows.device(group), group, storage, key, since_refresh=1)
            survivors.append(cohort)
            yield Forward(cohort.rows, None, refresh=True, count=T - P, count_prompt=True)  # stores nothing
        self.cohorts = survivors
