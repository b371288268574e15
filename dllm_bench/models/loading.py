"""Load LLaDA / Dream checkpoints (hub id or local directory) into :class:`DiffusionLM`, never running their code.

The checks and readers live in :mod:`dllm_bench.models.checkpoint`; a LLaDA-V directory goes to its own loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .architectures import architecture_of
from .checkpoint import (  # noqa: F401  (re-exported: the loading API)
    CheckpointError,
    _fill_special_ids,
    _read_tensors,
    checkpoint_fingerprint,
    checkpoint_tensors,
    detect_naming,
    is_llada_v_config,
    load_tokenizer,
    read_config,
    resolve_checkpoint_dir,
    resolve_device_dtype,
    token_ids,
    validate_tensors,
)
from .config import ModelConfig
from .lora import base_of, is_adapter_dir, merge_adapter, read_adapter_config
from .moe import MoEConfig, MoEDiffusionLM, is_moe_config
from .network import DiffusionLM


def parse_config(raw: dict[str, Any], name_or_path: str = "") -> ModelConfig:
    """The network config of a checkpoint's ``config.json`` (dense LLaDA / Dream, LLaDA-MoE or LLaDA-V's language
    model) without reading anything else: a value the network does not compute raises ModelConfigError, in one line
    naming the key (what a run's validation calls before any load)."""
    if is_llada_v_config(raw):
        from .llada_v import language_config

        return language_config(raw, name_or_path=name_or_path)
    arch = architecture_of(raw)
    if arch is not None:
        return arch.parse(raw, name_or_path)
    return (MoEConfig if is_moe_config(raw) else ModelConfig).from_hf_config(raw, name_or_path=name_or_path)


def load_model(
    name_or_path: str | Path,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    *,
    instruct: bool | None = None,
    revision: str | None = None,
    rope_full_precision: bool | None = None,
    attention: str | None = None,
    block_grid: str | None = None,
) -> DiffusionLM:
    """Build the network from ``config.json`` and load its safetensors (bf16 on GPU, fp32 on CPU by default).

    ``device="meta"`` builds the architecture only (no weights read). ``instruct`` overrides whether the chat
    template applies (default: the config/name says Instruct). ``rope_full_precision`` overrides where RoPE
    rotates: True = float32, False = the model dtype; None = as the published model code does for this
    checkpoint (LLaDA: its config key, default True; Dream and LLaDA-MoE: the model dtype), which gives its
    logits bit for bit on the CPU (tests/models/test_published_logits.py); on a GPU, where cuBLAS picks kernels by
    shape, only agreement to rounding is claimed.

    A PEFT LoRA adapter directory (``adapter_config.json``, no ``config.json``; D2F) loads its base checkpoint
    (``base_model_name_or_path``) with the adapter merged (:mod:`.lora`). ``attention`` / ``block_grid`` override
    the config's block-diffusion switches (:mod:`.blocks`; D2F runs LLaDA / Dream block-causal on an anchored grid,
    its blocks as long as the decoder's).
    """
    adapter = None
    if is_adapter_dir(Path(str(name_or_path)).expanduser()):
        adapter = Path(str(name_or_path)).expanduser()
        name_or_path = base_of(adapter, read_adapter_config(adapter))
    directory = resolve_checkpoint_dir(name_or_path, revision)
    raw = read_config(directory)
    if is_llada_v_config(raw):
        from .llada_v import load_llada_v

        return load_llada_v(directory, dtype=dtype, device=device, instruct=instruct,
                            rope_full_precision=rope_full_precision)
    device, dtype = resolve_device_dtype(device, dtype)
    arch = architecture_of(raw)  # block diffusion and LLaDA2 networks, by their architectures
    moe = arch is None and is_moe_config(raw)  # LLaDA-MoE: model_type "llada" too, told apart by its architectures
    config = parse_config(raw, name_or_path=str(name_or_path))
    if instruct is not None:
        config.is_instruct = instruct
    if rope_full_precision is not None:
        config.rope_full_precision = bool(rope_full_precision)
    if attention is not None or block_grid is not None:
        config = _with_blocks(config, attention, block_grid)
    found = None
    if device.type != "meta":
        found = checkpoint_tensors(directory)
        config.tensor_naming = "llama" if moe or arch is not None else detect_naming(list(found))
    with torch.device("meta"):
        model = arch.network(config) if arch is not None else MoEDiffusionLM(config) if moe else DiffusionLM(config)
    tokenizer = load_tokenizer(directory)
    _fill_special_ids(config, tokenizer)
    model.tokenizer = tokenizer
    if found is None:
        return model.to(dtype)
    validate_tensors(model, found)
    state = _read_tensors(found, device, dtype)
    if adapter is not None:
        state = merge_adapter(state, adapter, str(name_or_path))
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def load_tokenizer_config(name_or_path: str | Path, *, revision: str | None = None) -> tuple[ModelConfig, Any]:
    """(network config, tokenizer) of a checkpoint without its weights: what a run that only tokenizes needs (a
    served backend: prompts, stop, mask and pad ids). A hub id downloads only its config and tokenizer files; a
    local folder needs only ``config.json`` and ``tokenizer.json``; an adapter reads its base's."""
    path = Path(str(name_or_path)).expanduser()
    if is_adapter_dir(path):
        name_or_path = base_of(path, read_adapter_config(path))
    directory = resolve_checkpoint_dir(name_or_path, revision, weights=False)
    config = parse_config(read_config(directory), name_or_path=str(name_or_path))
    tokenizer = load_tokenizer(directory)
    if tokenizer is None:
        raise FileNotFoundError(f"no tokenizer.json in {directory}: a run encodes its prompts with the tokenizer "
                                "saved beside the config")
    _fill_special_ids(config, tokenizer)
    return config, tokenizer


def _with_blocks(config: ModelConfig, attention: str | None, block_grid: str | None) -> ModelConfig:
    """``config`` with its attention topology / block grid replaced (checked as a config's own values are)."""
    import dataclasses

    changes = {k: v for k, v in (("attention", attention), ("block_grid", block_grid)) if v is not None}
    return dataclasses.replace(config, **changes)
