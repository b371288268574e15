"""Decoding caches, one file each; importing this package registers every module in it (``base.CACHES``).

Adding a cache: a file here with a ``@register``-ed frozen dataclass and its session, its storage as one file in
``dllm_bench/models/cache/``, and ``conf/cache/<name>.yaml`` holding its parameters at their defaults
(tests/decoding/test_defaults_agree.py checks they agree). docs/architecture.md describes the protocol.
"""

from __future__ import annotations

import importlib
import pkgutil

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

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module != "base":
        importlib.import_module(f"{__name__}.{_module}")

__all__ = ["CACHES", "Cache", "CacheBase", "CacheSession", "Canvas", "Cohort", "Forward", "HostView", "StepRows",
           "build_cache", "cache_defaults", "cache_parameters", "limit_groups", "register"]
