"""Decoding caches, one file each; importing this package registers every module in it (``base.CACHES``).

Adding a cache: a file here with a ``@register``-ed frozen dataclass and its session, its storage as one file in
``dllm_bench/models/cache/``, and ``conf/cache/<name>.yaml`` extending its defaults (``- /defaults/cache/<name>@_here_``;
the dataclass holds them, docs/runner.md). docs/architecture.md describes the protocol.
"""

from __future__ import annotations

from dllm_bench.decoding.caches.base import (
    CACHES,
    Cache,
    CacheBase,
    CacheSession,
    Canvas,
    Cohort,
    Forward,
    HostView,
    StepRows,
    build_cache,
    cache_defaults,
    cache_parameters,
    limit_groups,
    register,
)
from dllm_bench.decoding.params import import_submodules

import_submodules(__name__, __path__)

__all__ = ["CACHES", "Cache", "CacheBase", "CacheSession", "Canvas", "Cohort", "Forward", "HostView", "StepRows",
           "build_cache", "cache_defaults", "cache_parameters", "limit_groups", "register"]
