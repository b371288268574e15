"""Fast-dLLM prefix cache: a full forward at each block start (and every ``refresh_every`` steps), then the
queries [block start, end of canvas) against the stored K/V of the prefix."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.caches.base import CacheBase, Canvas, Cohort, Forward, HostView, StepRows, register
from dllm_bench.models.cache.kv import KVCache


@register
@dataclass(frozen=True)
class PrefixCache(CacheBase):
    """Fast-dLLM prefix cache: full forward at each block start (and every ``refresh_every`` steps),
    then recompute [block start, end of canvas) against cached K/V of the prefix.

    ``compat_first_token`` reproduces Fast-dLLM's Dream loop: the refresh forward commits only the block's
    first position, whatever its confidence.
    """

    refresh_every: int | None = None
    compat_first_token: bool = False
    name: ClassVar[str] = "prefix"
    to_canvas_end: ClassVar[bool] = True  # a cached forward's queries run to the canvas end (dual: the block's)

    @property
    def force_first(self) -> bool:
        return self.compat_first_token

    def adjust_commit(self, commit: torch.Tensor, candidates: torch.Tensor, refreshed: torch.Tensor,
                      block_lo: torch.Tensor) -> torch.Tensor:
        """``compat_first_token``: a refresh commits only the block's first position, where it is still open (a
        mid-block refresh leaves the step to the rule)."""
        if not self.compat_first_token:
            return commit
        first = torch.zeros_like(candidates)
        first.scatter_(1, block_lo.clamp(max=candidates.shape[1] - 1).unsqueeze(1), True)
        first &= candidates
        forced = refreshed & first.any(dim=1)
        return torch.where(forced.unsqueeze(1), first, commit)

    def check(self) -> None:
        if self.refresh_every is not None and self.refresh_every < 1:
            raise ValueError(f"{self.name} refresh_every must be >= 1 or None, got {self.refresh_every}")

    def check_combination(self, *, policy: Any, rule: Any, gen_length: int, block_length: int) -> None:
        if not self.compat_first_token:
            return
        num_blocks = gen_length // block_length
        steps = getattr(policy, "steps", None)
        per_block = (steps // num_blocks if policy.name == "blocks" and steps is not None
                     else steps if policy.name == "dream" else None)
        if per_block == 1:
            raise ValueError(
                f"{self.name} compat_first_token commits only a block's first position at its refresh, so a fixed "
                f"schedule of 1 step per block would leave masks; give at least 2 steps per block or drop the compat"
            )

    def session(self, canvas: Canvas) -> BlockKVSession:
        return BlockKVSession(self, canvas)


class BlockKVSession:
    """Rows in cohorts by block: a cohort's storage is refreshed (one full forward) when its rows reach a new block
    or ``refresh_every`` forwards have passed; in between its rows query the block's span."""

    def __init__(self, cache: PrefixCache, canvas: Canvas) -> None:
        self.cache, self.canvas = cache, canvas
        self.cohorts: list[Cohort] = []

    def forwards(self, view: HostView, rows: StepRows, ids: torch.Tensor) -> Iterator[Forward]:
        P, T, every = self.canvas.prompt_length, self.canvas.length, self.cache.refresh_every
        active = set(view.rows)
        survivors, covered = [], set()
        for cohort in self.cohorts:
            due = every is not None and cohort.since_refresh >= every
            keep = [r in active and (view.block_lo[r], view.block_hi[r]) == cohort.block and not due
                    for r in cohort.host_rows]
            if not cohort.shrink(keep, rows):
                continue
            covered.update(cohort.host_rows)
            s = P + cohort.block[0]
            e = T if self.cache.to_canvas_end else P + cohort.block[1]
            cohort.since_refresh += 1
            survivors.append(cohort)
            yield Forward(cohort.rows, cohort.storage, refresh=False, count=e - s + self.canvas.shift, start=s, end=e)
        refresh = [r for r in view.rows if r not in covered]
        for key in sorted({(view.block_lo[r], view.block_hi[r]) for r in refresh}):
            group = [r for r in refresh if (view.block_lo[r], view.block_hi[r]) == key]
            cohort = Cohort(rows.device(group), group, KVCache(), key, since_refresh=1)
            survivors.append(cohort)
            yield Forward(cohort.rows, cohort.storage, refresh=True, count=T - P, count_prompt=True)
        self.cohorts = survivors
