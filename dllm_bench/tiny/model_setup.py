"""Build the tiny models' tokenizer, network and checkpoint in the real LLaDA / Dream / LLaDA-MoE formats and the
block-diffusion ones (Fast-dLLM v2, SDAR, LLaDA2: ``models/tiny_blocks.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dllm_bench.models import DiffusionLM, ModelConfig
from dllm_bench.models.architectures import architecture_of
from dllm_bench.models.checkpoint import _fill_special_ids
from dllm_bench.models.moe import MoEConfig, MoEDiffusionLM
from dllm_bench.models.tiny_blocks import FORMATS as BLOCK_FORMATS
from dllm_bench.models.tiny_blocks import block_hf_config
from dllm_bench.models.tiny_format import DEFAULT_CHARS, build_char_tokenizer, hf_config_for, save_checkpoint
from dllm_bench.models.tiny_moe import moe_hf_config

FLAVOURS = ("llada", "dream", "llada_moe", *BLOCK_FORMATS)
EOT_TOKEN = {"llada": "<|eot_id|>", "dream": "<|im_end|>", "llada_moe": "<|eot_id|>"}
TINY_ROPE_THETA = 10000.0  # sequences are < 128 tokens; LLaDA's 500000 would waste most rotary frequencies
TINY_MAX_SEQUENCE_LENGTH = 256


def build_tiny_tokenizer(flavour: str) -> Any:
    """Character-level tokenizer over printable ASCII with the flavour's special tokens and chat template
    (the tiny LLaDA-MoE uses LLaDA's, as ``models/tiny_moe.py`` does)."""
    if flavour in BLOCK_FORMATS:
        return build_char_tokenizer(DEFAULT_CHARS, flavour)
    return build_char_tokenizer(DEFAULT_CHARS, "dream" if flavour == "dream" else "llada")


def build_tiny_model(
    flavour: str, tokenizer: Any, *, d_model: int, n_layers: int, n_heads: int, mlp_hidden_size: int,
    llada_qkv_bias: bool = False, num_experts: int = 8, num_experts_per_tok: int = 2, block_size: int = 4,
) -> DiffusionLM:
    """A fresh network whose config (``model.config.raw``) is the real schema's config.json for the flavour.

    Dream gets grouped-query attention (half as many K/V heads) and q/k/v biases, as Dream-7B has; LLaDA
    gets q/k/v biases only when asked (the schema's ``include_qkv_bias``; LLaDA-8B has none). LLaDA-MoE
    (``llada_moe``) gets every layer a MoE layer of ``num_experts`` experts of size ``mlp_hidden_size``, top
    ``num_experts_per_tok``, qk-norm, no shared expert, no expert bias and no ``clip_qkv`` (OLMoE's layout).
    The block-diffusion formats (``fast_dllm_v2``, ``sdar``, ``llada2``) take the published schema of
    :func:`~dllm_bench.models.tiny_blocks.block_hf_config` with blocks of ``block_size``; LLaDA2's MoE layers (all
    but the first) have ``num_experts`` experts of ``mlp_hidden_size // num_experts_per_tok``, in two groups.
    """
    if flavour in BLOCK_FORMATS:
        return _build_tiny_block_model(flavour, tokenizer, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                                       mlp_hidden_size=mlp_hidden_size, num_experts=num_experts,
                                       top_k=num_experts_per_tok, block_size=block_size)
    if flavour == "llada_moe":
        return _build_tiny_moe(tokenizer, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                               expert_size=mlp_hidden_size, num_experts=num_experts, top_k=num_experts_per_tok)
    n_kv_heads = n_heads if flavour == "llada" else max(1, n_heads // 2)
    hf = hf_config_for(
        flavour, tokenizer, d_model=d_model, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
        mlp_hidden_size=mlp_hidden_size, rope_theta=TINY_ROPE_THETA,
        max_sequence_length=TINY_MAX_SEQUENCE_LENGTH, instruct=True,
    )
    if flavour == "llada" and llada_qkv_bias:
        hf["include_qkv_bias"] = True
    hf["_name_or_path"] = f"dllm-bench/tiny_{flavour}"
    config = ModelConfig.from_hf_config(hf, name_or_path=hf["_name_or_path"])
    config.eot_token_id = tokenizer.convert_tokens_to_ids(EOT_TOKEN[flavour])
    config.bos_token_id = tokenizer.bos_token_id
    model = DiffusionLM(config)
    model.tokenizer = tokenizer
    return model


def _build_tiny_moe(tokenizer: Any, *, d_model: int, n_layers: int, n_heads: int, expert_size: int,
                    num_experts: int, top_k: int) -> MoEDiffusionLM:
    hf = moe_hf_config(
        tokenizer, hidden_size=d_model, num_layers=n_layers, num_heads=n_heads, num_experts=num_experts,
        top_k=top_k, expert_intermediate_size=expert_size, dense_intermediate_size=expert_size * top_k,
        shared_expert_intermediate_size=None, moe_layer_freq=[1] * n_layers, clip_qkv=None, expert_bias=False,
        rope_theta=TINY_ROPE_THETA, max_position_embeddings=TINY_MAX_SEQUENCE_LENGTH,
    )
    hf["_name_or_path"] = "dllm-bench/tiny_llada_moe"
    config = MoEConfig.from_hf_config(hf, name_or_path=hf["_name_or_path"])
    config.eot_token_id = tokenizer.convert_tokens_to_ids(EOT_TOKEN["llada_moe"])
    config.bos_token_id = tokenizer.bos_token_id
    model = MoEDiffusionLM(config)
    model.tokenizer = tokenizer
    return model


def _build_tiny_block_model(flavour: str, tokenizer: Any, *, d_model: int, n_layers: int, n_heads: int,
                            mlp_hidden_size: int, num_experts: int, top_k: int, block_size: int) -> DiffusionLM:
    moe = dict(num_experts=num_experts, top_k=top_k, moe_intermediate_size=mlp_hidden_size // top_k, n_group=2,
               topk_group=2) if flavour == "llada2" else {}
    hf = block_hf_config(flavour, tokenizer, hidden_size=d_model, num_layers=n_layers, num_heads=n_heads,
                         num_kv_heads=max(1, n_heads // 2), intermediate_size=mlp_hidden_size, block_size=block_size,
                         max_position_embeddings=TINY_MAX_SEQUENCE_LENGTH, **moe)
    hf["rope_theta"] = TINY_ROPE_THETA
    hf["_name_or_path"] = f"dllm-bench/tiny_{flavour}"
    arch = architecture_of(hf)
    config = arch.parse(hf, hf["_name_or_path"])
    _fill_special_ids(config, tokenizer)  # as loading the checkpoint sets them
    model = arch.network(config)
    model.tokenizer = tokenizer
    return model


def save_tiny_checkpoint(model: DiffusionLM, tokenizer: Any, directory: Path, train_log: dict) -> Path:
    """config.json, model.safetensors, tokenizer files, and train_log.json (the loss curve) in `directory`."""
    out = save_checkpoint(model, tokenizer, directory, model.config.raw)
    (Path(directory) / "train_log.json").write_text(json.dumps(train_log, indent=1) + "\n")
    return out
