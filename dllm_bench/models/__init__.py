"""Networks, caches' storage and checkpoint loading for LLaDA- and Dream-flavoured diffusion LMs (and LLaDA-MoE)."""

from .cache import FeatureCache, KVCache
from .config import ModelConfig, ModelConfigError
from .loading import CheckpointError, load_model, load_tokenizer
from .moe import MoEConfig, MoEDiffusionLM
from .network import DiffusionLM

__all__ = [
    "CheckpointError",
    "ModelConfigError",
    "DiffusionLM",
    "FeatureCache",
    "KVCache",
    "MoEConfig",
    "MoEDiffusionLM",
    "ModelConfig",
    "load_model",
    "load_tokenizer",
]
