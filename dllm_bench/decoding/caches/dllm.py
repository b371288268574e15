"""dLLM-Cache: the prompt's features refreshed every K_p forwards, the response's every K_r, and V-verify's
partial recomputation (ratio rho) of the least similar response tokens in between."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.caches.base import (
    CacheBase,
    Canvas,
    Cohort,
    Forward,
    HostView,
    StepRows,
    limit_groups,
    register,
)
from dllm_bench.models.cache.features import FeatureCache


@register
@dataclass(frozen=True)
class DLLMCache(CacheBase):
    """dLLM-Cache: prompt refreshed every K_p forwards, response every K_r, V-verify ratio rho on the rest.

    ``verify_compat`` ranks V-verify's rows as the published hook (similarity in the V dtype, ``torch.topk``)
    instead of the CPU-independent float64 rule (:func:`dllm_bench.models.cache.least_similar_rows`).
    """

    prompt_interval: int = 100  # dLLM-Cache's LLaDA-Base setting; its LLaDA-Instruct GSM8K run used 50/7
    response_interval: int = 6
    verify_ratio: float = 0.25
    layer0_always: bool = True
    verify_compat: bool = False
    name: ClassVar[str] = "dllm"
    sync_budget: ClassVar[int] = 5  # its refresh schedule and verify set
    shorter_canvas: ClassVar[bool] = True
    stores: ClassVar[tuple[str, ...]] = ("k", "v", "attn", "ffn")

    def check(self) -> None:
        if self.prompt_interval < 1 or self.response_interval < 1:
            raise ValueError(
                f"dllm prompt_interval and response_interval must be >= 1 (1 = every forward), got "
                f"{self.prompt_interval}, {self.response_interval}"
            )
        if not 0 <= self.verify_ratio <= 1:
            raise ValueError(f"dllm verify_ratio must be in [0, 1], got {self.verify_ratio}")

    def plan(self, forward_index: int) -> tuple[bool, bool, float]:
        """(refresh_prompt, refresh_response, verify_ratio) for the 1-based forward count."""
        refresh_prompt = (forward_index - 1) % self.prompt_interval == 0
        refresh_response = (forward_index - 1) % self.response_interval == 0
        return refresh_prompt, refresh_response, (0.0 if refresh_response else self.verify_ratio)

    def session(self, canvas: Canvas) -> DLLMSession:
        return DLLMSession(self, canvas)


class DLLMSession:
    """One cohort for the whole decode (the intervals count forwards, not blocks); rows that finish leave it. Rows
    a policy cuts at different canvas lengths share the storage but run as separate forwards over their own rows.
    Forward positions: the prompt's real tokens on a prompt refresh, the answer on a response refresh, else the
    tokens V-verify recomputes."""

    def __init__(self, cache: DLLMCache, canvas: Canvas) -> None:
        self.cache, self.canvas = cache, canvas
        self.cohort: Cohort | None = None

    def forwards(self, view: HostView, rows: StepRows, ids: torch.Tensor) -> Iterator[Forward]:
        P = self.canvas.prompt_length
        if self.cohort is None:
            storage = FeatureCache(prompt_length=P, refresh_layer0=self.cache.layer0_always,
                                   verify_compat=self.cache.verify_compat)
            self.cohort = Cohort(rows.device(view.rows), list(view.rows), storage)
        cohort = self.cohort
        active = set(view.rows)
        if not cohort.shrink([r in active for r in cohort.host_rows], rows):
            raise RuntimeError(f"rows {view.rows} are not in the dLLM-Cache's cohort {cohort.host_rows} (engine bug)")
        cohort.forwards += 1
        refresh_prompt, refresh_response, ratio = self.cache.plan(cohort.forwards)
        fc: FeatureCache = cohort.storage
        fc.plan(refresh_prompt, refresh_response, ratio)
        groups = limit_groups(cohort.host_rows, view.limit, self.canvas.length - P)
        for group, lim in groups:
            rows_g = cohort.rows if len(groups) == 1 else rows.device(group)
            fc.select_rows(None if len(groups) == 1 else torch.searchsorted(cohort.rows, rows_g))
            yield Forward(rows_g, fc, refresh=refresh_prompt and refresh_response,
                          count=lim if refresh_response else fc.verified_count(lim), count_prompt=refresh_prompt,
                          end=P + lim, cut=True)
        fc.select_rows(None)
