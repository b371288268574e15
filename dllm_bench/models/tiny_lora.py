"""Random D2F-shaped adapters: LoRA weights in PEFT's format (:mod:`.lora`) on the embedded tiny LLaDA and Dream,
targeting the modules D2F's training wraps, at the rank of the shipped trained ones (dllm_bench/tiny/checkpoints/
tiny_*_d2f, written by ``python -m dllm_bench.tiny.train_d2f``): for tests of the format and the merge.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import checkpoint_tensors, read_config
from .config import ModelConfig
from .lora import D2F_TARGET_MODULES, save_adapter
from .tiny_moe import standard_normal

TINY_RANK, TINY_ALPHA = 16, 16.0  # the shipped trained adapters' (alpha / r = 1, as D2F's 32 / 32)


def make_random_d2f_adapter(base_dir: str | Path, directory: str | Path, seed: int = 0, *, r: int = TINY_RANK,
                            lora_alpha: float = TINY_ALPHA, std: float = 0.3, base_name: str | None = None) -> Path:
    """A D2F-shaped LoRA adapter for the checkpoint at ``base_dir`` (its flavour's target modules in every layer);
    A and B drawn the same under every ATen kernel width; ``base_name`` is written as the base (default: the
    relative path from ``directory``)."""
    base_dir = Path(base_dir)
    flavour = ModelConfig.from_hf_config(read_config(base_dir)).flavour
    targets = D2F_TARGET_MODULES[flavour]
    gen = torch.Generator().manual_seed(seed)
    pairs = {}
    for name, (_, shape) in sorted(checkpoint_tensors(base_dir).items()):
        module = name[: -len(".weight")] if name.endswith(".weight") else ""
        if module.rsplit(".", 1)[-1] not in targets:
            continue
        out_dim, in_dim = shape
        a = standard_normal(torch.Size([r, in_dim]), gen) * std / in_dim ** 0.5
        b = standard_normal(torch.Size([out_dim, r]), gen) * std / r ** 0.5
        pairs[name] = (a, b)
    if base_name is None:
        import os

        base_name = os.path.relpath(base_dir.resolve(), Path(directory).resolve())
    return save_adapter(directory, pairs, base=base_name, r=r, lora_alpha=lora_alpha, target_modules=targets)

