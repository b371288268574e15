"""Fast-dLLM dual cache: the prefix cache's schedule, with a cached forward's queries only the current block."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dllm_bench.decoding.caches.base import register
from dllm_bench.decoding.caches.prefix import PrefixCache


@register
@dataclass(frozen=True)
class DualCache(PrefixCache):
    """Fast-dLLM dual cache: full forward at each block start, then only the block, writing its K/V in place.
    Runs until the block is full (the published loop stops after steps_per_block - 1 cached steps)."""

    name: ClassVar[str] = "dual"
    to_canvas_end: ClassVar[bool] = False
