"""Cache storage that plugs into :meth:`DiffusionLM.forward` through ``run_layer``: the ``Storage`` protocol
(``base.py``) and one storage per file (``kv.py``: K/V of the canvas; ``features.py``: dLLM-Cache's features).
A decoding cache imports its storage from its own file."""

from .base import Storage
from .features import FeatureCache, least_similar_rows
from .kv import KVCache

__all__ = ["FeatureCache", "KVCache", "Storage", "least_similar_rows"]
