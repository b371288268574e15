"""dKV-Cache-Greedy (horseee/dKV-Cache ``generation_utils/llada_dkv_cache_greedy.py`` with
``models/modeling_llada_dkv_cache_greedy.py``; LLaDA): a block's step i (from 0) is a full forward when
i % ``refresh_every`` == 0 (the published ``cache_reloading_step``); otherwise it queries only the positions the step
commits, those the previous step committed (their K/V enter the cache now) and a ``window`` of still-masked
neighbours of each commit, against the K/V stored for the rest, which are never recomputed until the next full
forward. It needs the step's commits before the forward: its rule is ``random_order`` (the published loop accepts
only ``remasking='random'``, one draw per block fixing the order)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.caches.base import Canvas, Cohort, Forward, HostView, register
from dllm_bench.decoding.caches.dkv import DKVCache, DKVSession, _BlockState


def window_neighbours(order: torch.Tensor, taken: torch.Tensor, masked: torch.Tensor, window: int,
                      commits: int) -> torch.Tensor:
    """``taken`` [b, G] bool grown by each commit's ``window`` nearest eligible neighbours, the commits taken in their
    order (``order`` [b, G]: a commit's score, -inf elsewhere; the higher first). A commit at s looks at s-1, s+1,
    s-2, s+2, ... and takes the first ``window`` that are masked and not taken yet (by the commits, the previous
    step's commits or an earlier commit's window), as the published walk does; ``commits`` bounds the commits a row
    has (a host int)."""
    b, G = order.shape
    if window == 0 or commits == 0 or G < 2:
        return taken
    taken = taken.clone()
    d = torch.arange(1, G, device=order.device)
    offsets = torch.stack([-d, d], dim=1).reshape(-1)  # -1, +1, -2, +2, ...
    ranked = torch.sort(order, dim=1, descending=True, stable=True)
    for k in range(commits):
        s = ranked.indices[:, k]
        has = ranked.values[:, k] > float("-inf")
        pos = s.unsqueeze(1) + offsets.unsqueeze(0)
        inside = (pos >= 0) & (pos < G)
        at = pos.clamp(0, G - 1)
        eligible = (masked & ~taken).gather(1, at) & inside & has.unsqueeze(1)
        pick = eligible & (eligible.long().cumsum(dim=1) <= window)
        taken |= torch.zeros(b, G, dtype=torch.long, device=order.device).scatter_add_(1, at, pick.long()) > 0
    return taken


@register
@dataclass(frozen=True)
class DKVGreedyCache(DKVCache):
    """dKV-Cache-Greedy. Presets: the README's ``--cache-steps 2 --window-size 4`` (the defaults)."""

    refresh_every: int = 2
    window: int = 4
    name: ClassVar[str] = "dkv_greedy"
    sync_budget: ClassVar[int] = 4  # a row's commit count (it bounds the window walk) and its query set's width
    flavours: ClassVar[tuple[str, ...]] = ("llada",)
    loops: ClassVar[dict[str, str]] = {"llada": "blocks"}

    def check(self) -> None:
        if self.refresh_every < 1:
            raise ValueError(f"dkv_greedy refresh_every must be >= 1 (1 = every step a full forward), got "
                             f"{self.refresh_every}")
        if self.window < 0:
            raise ValueError(f"dkv_greedy window must be >= 0 (masked neighbours queried per commit), got {self.window}")

    def check_combination(self, *, policy: Any, rule: Any, gen_length: int, block_length: int) -> None:
        if getattr(policy, "name", None) != "blocks" or getattr(rule, "name", None) != "random_order":
            raise ValueError(f"cache 'dkv_greedy' runs as published only with policy 'blocks' (steps) and rule "
                             f"'random_order' (it queries the step's commits, known before the forward only in a "
                             f"drawn order), got policy {getattr(policy, 'name', None)!r} and rule "
                             f"{getattr(rule, 'name', None)!r}")

    def session(self, canvas: Canvas) -> DKVGreedySession:
        return DKVGreedySession(self, canvas)


class DKVGreedySession(DKVSession):
    """dKV-Decode's cohorts by block; a cohort's ``_BlockState.masked`` holds the previous step's commits."""

    cache: DKVGreedyCache

    def _step(self, cohort: Cohort, state: _BlockState, view: HostView, ids: torch.Tensor) -> Forward:
        if view.planned is None:
            raise ValueError("cache 'dkv_greedy' needs the step's commits before its forward (rule 'random_order')")
        P, T = self.canvas.prompt_length, self.canvas.length
        i = cohort.forwards
        order = view.planned.index_select(0, cohort.rows)
        commits = order > float("-inf")
        if i % self.cache.refresh_every == 0:
            forward = Forward(cohort.rows, cohort.storage, refresh=True, count=T - P, count_prompt=True)
        else:
            masked = ids.index_select(0, cohort.rows)[:, P:] == self.canvas.mask_token_id
            most = int(commits.sum(dim=1).max())  # host read: the commits a row has bound the window walk
            query = window_neighbours(order, commits | state.masked, masked, self.cache.window, most)
            prompt = torch.zeros(len(cohort.host_rows), P, dtype=torch.bool, device=ids.device)
            # the candidates it does not query get zero logits: the order, not their logits, picks the commits
            forward = replace(self._at(cohort, torch.cat([prompt, query], dim=1), query.sum(dim=1).tolist()),
                              unqueried_zero=True)
        state.masked = commits
        cohort.forwards += 1
        return forward
