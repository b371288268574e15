"""Small checkpoints in the published block-diffusion formats: Fast-dLLM v2, SDAR and LLaDA2 (config schema, tensor
names, tokenizer files), random weights for tests.

Each config carries the key set of the real one (``reference_configs/fast-dllm-v2-7b``, ``sdar-1.7b-chat``,
``llada2-mini``) sized down, plus ``mask_token_id`` where the real config has none (the published code takes the
mask id as an argument; a character vocabulary puts it elsewhere). The tensors are named as the published modeling
files name them, so those files load these checkpoints too (tests/models/test_block_published_logits.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .architectures import architecture_of
from .moe import published_parameters
from .tiny_format import DEFAULT_CHARS, build_char_tokenizer, save_checkpoint
from .tiny_moe import standard_normal

FORMATS = ("fast_dllm_v2", "sdar", "llada2")

_FAST_DLLM_V2: dict[str, Any] = {
    "architectures": ["Fast_dLLM_QwenForCausalLM"], "model_type": "Fast_dLLM_Qwen", "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration.Fast_dLLM_QwenConfig", "AutoModel": "modeling.Fast_dLLM_QwenModel",
                 "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"},
    "conplemenrary_mask": True, "hidden_act": "silu", "initializer_range": 0.02, "rope_scaling": None,
    "sliding_window": None, "torch_dtype": "float32", "use_cache": True, "use_sliding_window": False,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
}
_SDAR: dict[str, Any] = {
    "architectures": ["SDARForCausalLM"], "model_type": "sdar",
    "auto_map": {"AutoConfig": "configuration_sdar.SDARConfig", "AutoModel": "modeling_sdar.SDARModel",
                 "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"},
    "attention_bias": False, "attention_dropout": 0.0, "attn_implementation": "sdpa", "debug": False, "ep_size": 1,
    "fuse_cross_entropy": False, "hidden_act": "silu", "initializer_range": 0.02, "micro_forward": False,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "skip_checkpoint": False,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": False,
    "use_deepep": False, "use_sliding_window": False,
}
_LLADA2: dict[str, Any] = {
    "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe", "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
                 "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
                 "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"},
    "hidden_act": "silu", "norm_topk_prob": True, "norm_head": False, "rope_scaling": None,
    "tie_word_embeddings": False, "torch_dtype": "float32", "use_bias": False, "use_rmsnorm": True,
    "rms_norm_eps": 1e-06, "use_cache": False, "use_qkv_bias": False, "embedding_dropout": 0.0, "norm_softmax": False,
    "output_dropout": 0.0, "using_split_qkv_in_self_attention": False, "router_dtype": "fp32",
    "moe_router_enable_expert_bias": True, "score_function": "sigmoid", "initializer_range": 0.02,
    "output_router_logits": False, "use_sliding_window": False, "use_qk_norm": True, "rope_theta": 600000,
}


def block_hf_config(fmt: str, tokenizer: Any, *, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4,
                    num_kv_heads: int = 2, intermediate_size: int = 96, block_size: int = 4, head_dim: int | None = None,
                    tie_word_embeddings: bool = False, num_experts: int = 8, top_k: int = 2,
                    moe_intermediate_size: int = 16, n_group: int = 4, topk_group: int = 2,
                    max_position_embeddings: int = 1024) -> dict[str, Any]:
    """A ``config.json`` dict of format ``fmt`` (one of :data:`FORMATS`) sized as asked, ids from the tokenizer."""
    vocab = -(-len(tokenizer) // 16) * 16
    ids = dict(vocab_size=vocab, mask_token_id=tokenizer.mask_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    size = dict(hidden_size=hidden_size, num_hidden_layers=num_layers, num_attention_heads=num_heads,
                num_key_value_heads=num_kv_heads, intermediate_size=intermediate_size,
                max_position_embeddings=max_position_embeddings)
    if fmt == "fast_dllm_v2":
        cfg = {**_FAST_DLLM_V2, **size, **ids, "bd_size": block_size, "layer_types": ["full_attention"] * num_layers,
               "max_window_layers": num_layers, "tie_word_embeddings": tie_word_embeddings}
    elif fmt == "sdar":
        cfg = {**_SDAR, **size, **ids, "block_size": block_size, "head_dim": head_dim or hidden_size // num_heads,
               "max_window_layers": num_layers}
    elif fmt == "llada2":
        cfg = {**_LLADA2, **size, **ids, "head_dim": head_dim or hidden_size // num_heads, "first_k_dense_replace": 1,
               "num_experts": num_experts, "num_experts_per_tok": top_k, "num_shared_experts": 1,
               "moe_intermediate_size": moe_intermediate_size, "n_group": n_group, "topk_group": topk_group,
               "routed_scaling_factor": 2.5, "partial_rotary_factor": 0.5, "rotary_dim": (head_dim or hidden_size // num_heads) // 2,
               "max_window_layers": num_layers, "block_size": block_size}
    else:
        raise ValueError(f"format {fmt!r} is not one of {FORMATS}")
    cfg["dllm_bench_instruct"] = True
    return cfg


def make_random_block_checkpoint(directory: str | Path, fmt: str, seed: int = 0, *, chars: str = DEFAULT_CHARS,
                                 init_std: float = 0.5, **sizes: Any) -> Path:
    """A random-weight checkpoint of format ``fmt`` in the published layout (weights drawn the same under every
    ATen kernel width, :func:`~dllm_bench.models.tiny_moe.standard_normal`); ``sizes`` go to :func:`block_hf_config`."""
    tokenizer = build_char_tokenizer(chars, fmt)
    cfg = block_hf_config(fmt, tokenizer, **sizes)
    arch = architecture_of(cfg)
    model = arch.network(arch.parse(cfg, ""))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in published_parameters(model):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * standard_normal(p.shape, gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * standard_normal(p.shape, gen))
            else:  # large enough that confidences vary across positions and steps
                p.copy_(standard_normal(p.shape, gen) * init_std / p.shape[-1] ** 0.5)
        for _, b in model.named_buffers():  # LLaDA2's expert biases: large enough to change some choices
            b.copy_(0.05 * standard_normal(b.shape, gen))
    return save_checkpoint(model, tokenizer, directory, cfg)
