"""Cache storage that plugs into :meth:`DiffusionLM.forward` through ``run_layer``: the ``Storage`` protocol
(``base.py``) and one storage per file (``kv.py``: K/V of the canvas; ``features.py``: dLLM-Cache's features;
``committed.py``: K/V of a block-causal model's committed blocks).
A decoding cache imports its storage from its own file."""

from .base import Storage
from .committed import CommittedBlockCache
from .features import FeatureCache, least_similar_rows
from .kv import KVCache

__all__ = ["CommittedBlockCache", "FeatureCache", "KVCache", "Storage", "least_similar_rows"]
