"""Networks, caches' storage and checkpoint loading for LLaDA- and Dream-flavoured diffusion LMs, LLaDA-MoE, and the
block-diffusion networks (Fast-dLLM v2, SDAR, LLaDA2)."""

from .cache import CommittedBlockCache, FeatureCache, KVCache
from .config import ModelConfig, ModelConfigError
from .loading import CheckpointError, load_model, load_tokenizer
from .moe import MoEConfig, MoEDiffusionLM
from .network import DiffusionLM

__all__ = [
    "CheckpointError",
    "CommittedBlockCache",
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
