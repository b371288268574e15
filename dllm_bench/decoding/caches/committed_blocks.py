"""Committed blocks: the K/V of every position before each row's current block, written once and read after.

For a block-causal model (bidirectional inside a block, causal across blocks) a position before the current block
attends nothing after it, so its K/V never change: each step's forward starts at the committed end, runs to the
furthest canvas limit of the step's rows, and appends the K/V of the positions that every row has finished (before
each row's block) in that same forward (D2F's pipeline: the finished blocks at the front of the forward that runs
the open ones). Storage: :class:`~dllm_bench.models.cache.committed.CommittedBlockCache`. Exact to rounding: a
forward equals recomputing the canvas under the block-causal mask (tests/decoding/test_pipeline.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.caches.base import CacheBase, Canvas, Forward, HostView, StepRows, register
from dllm_bench.models.cache.committed import CommittedBlockCache

# the policies whose canvas grows block by block, the blocks before each row's current one finished
GROWING_POLICIES = ("pipeline",)


@register
@dataclass(frozen=True)
class CommittedBlocksCache(CacheBase):
    """K/V of the positions before every row's block, appended as they finish (block-causal models only)."""

    name: ClassVar[str] = "committed_blocks"
    shorter_canvas: ClassVar[bool] = True
    model_switches: ClassVar[dict[str, str]] = {"attention": "block_causal", "block_grid": "anchored"}
    sync_budget: ClassVar[int] = 4  # it reads each step's committed end and forward span (scripts/count_syncs.py: 10 in 3)

    def check_combination(self, *, policy, rule, gen_length: int, block_length: int) -> None:
        if policy.name not in GROWING_POLICIES:
            raise ValueError(f"cache {self.name!r} needs a policy that grows the canvas block by block (pipeline), "
                             f"got {policy.name!r}")

    def session(self, canvas: Canvas) -> CommittedBlocksSession:
        config = getattr(canvas.model, "config", None)
        if config is not None and getattr(config, "attention", "full") != self.model_switches["attention"]:
            raise ValueError(f"cache {self.name!r} keeps a block's K/V only under block-causal attention; this model "
                             "attends fully (use cache none)")
        return CommittedBlocksSession(canvas)


class CommittedBlocksSession:
    """One storage for the decode's rows; each step one forward from the committed end to the furthest limit."""

    def __init__(self, canvas: Canvas) -> None:
        self.canvas = canvas
        self.storage = CommittedBlockCache()
        self.held: list[int] | None = None

    def forwards(self, view: HostView, rows: StepRows, ids: torch.Tensor) -> Iterator[Forward]:
        P = self.canvas.prompt_length
        if self.held is not None and self.held != view.rows:
            keep = [i for i, r in enumerate(self.held) if r in view.rows]
            self.storage.keep_rows(torch.tensor(keep, dtype=torch.long, device=rows.rows.device))
        self.held = list(view.rows)
        start = self.storage.committed
        end = self.canvas.length if view.limit is None else P + max(view.limit[r] for r in view.rows)
        final = P + min(view.block_lo[r] for r in view.rows)  # every row has finished what comes before
        if final > start:
            self.storage.commit_next(final - start)
        count = end - start + (self.canvas.shift if start > 0 else 0)
        yield Forward(rows.device(view.rows), self.storage, refresh=False, count=count, start=start, end=end, cut=True)
