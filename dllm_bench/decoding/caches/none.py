"""No cache: every step is a full forward over the whole canvas (or the part a policy's limit leaves)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import torch

from dllm_bench.decoding.caches.base import (
    CacheBase,
    Canvas,
    Forward,
    HostView,
    StepRows,
    limit_groups,
    register,
)


@register
@dataclass(frozen=True)
class NoCache(CacheBase):
    """Every step is a full forward over the whole canvas."""

    name: ClassVar[str] = "none"
    stateless: ClassVar[bool] = True
    shorter_canvas: ClassVar[bool] = True
    stores: ClassVar[tuple[str, ...]] = ()

    def session(self, canvas: Canvas) -> NoCacheSession:
        return NoCacheSession(canvas)


class NoCacheSession:
    """One plain forward per canvas length the step's rows see; each row counts its prompt and that answer."""

    def __init__(self, canvas: Canvas) -> None:
        self.canvas = canvas

    def forwards(self, view: HostView, rows: StepRows, ids: torch.Tensor) -> Iterator[Forward]:
        P = self.canvas.prompt_length
        for group, lim in limit_groups(view.rows, view.limit, self.canvas.length - P):
            yield Forward(rows.device(group), None, refresh=True, count=lim, count_prompt=True, end=P + lim)
