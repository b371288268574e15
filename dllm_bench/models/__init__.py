"""Networks, caches' storage and checkpoint loading for LLaDA- and Dream-flavoured diffusion LMs."""

from .cache import FeatureCache, KVCache
from .config import ConfigError, ModelConfig
from .loading import CheckpointError, load_model, load_tokenizer
from .network import DiffusionLM

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DiffusionLM",
    "FeatureCache",
    "KVCache",
    "ModelConfig",
    "load_model",
    "load_tokenizer",
]
