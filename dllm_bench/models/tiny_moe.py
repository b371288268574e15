"""Small LLaDA-MoE checkpoints in the published format: config keys, unfused expert tensor names, tokenizer files.

The config uses the keys of the published ``LLaDAConfig`` of LLaDA-MoE (inclusionAI/dInfer
``tools/configuration_lladamoe.py``); the tensors are named as its unfused modeling file names them
(``model.layers.{i}.mlp.experts.{e}.gate_proj.weight``), so the published code loads these files too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .moe import MoEConfig, MoEDiffusionLM, published_parameters
from .tiny_format import DEFAULT_CHARS, build_char_tokenizer, save_checkpoint

# keys of the published config class with the values that do not depend on the size
_MOE_TEMPLATE: dict[str, Any] = {
    "architectures": ["LLaDAMoEModelLM"], "model_type": "llada",
    "auto_map": {"AutoConfig": "configuration_lladamoe.LLaDAConfig",
                 "AutoModel": "modeling_lladamoe.LLaDAMoEModelLM"},
    "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
    "output_router_logits": False, "router_aux_loss_coef": 0.01, "norm_topk_prob": False,
    "moe_router_score_function": "softmax", "routed_scaling_factor": 1, "router_num_group": None,
    "router_topk_group": None, "partial_rotary_factor": 1.0, "rope_scaling": None, "tie_word_embeddings": False,
    "use_cache": False, "torch_dtype": "float32",
}


def moe_hf_config(
    tokenizer: Any, *, hidden_size: int, num_layers: int, num_heads: int, num_experts: int, top_k: int,
    expert_intermediate_size: int, dense_intermediate_size: int, shared_expert_intermediate_size: int | None,
    moe_layer_freq: list[int], clip_qkv: float | None, expert_bias: bool, rope_theta: float = 50000.0,
    max_position_embeddings: int = 1024,
) -> dict[str, Any]:
    """A LLaDA-MoE ``config.json`` dict sized as asked, ids from the tokenizer."""
    cfg = dict(_MOE_TEMPLATE)
    cfg.update(
        vocab_size=-(-len(tokenizer) // 16) * 16, hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=num_heads, num_key_value_heads=num_heads, num_experts=num_experts,
        num_experts_per_tok=top_k, expert_intermediate_size=expert_intermediate_size,
        dense_intermediate_size=dense_intermediate_size,
        shared_expert_intermediate_size=shared_expert_intermediate_size, moe_layer_freq=list(moe_layer_freq),
        qk_layernorm=True, clip_qkv=clip_qkv, moe_router_enable_expert_bias=expert_bias, rope_theta=rope_theta,
        rms_norm_eps=1e-6, max_position_embeddings=max_position_embeddings,
        mask_token_id=tokenizer.mask_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id, dllm_bench_instruct=True,
    )
    return cfg


def make_random_moe_checkpoint(
    directory: str | Path,
    seed: int = 0,
    *,
    hidden_size: int = 32,
    num_layers: int = 3,
    num_heads: int = 4,
    num_experts: int = 8,
    top_k: int = 2,
    expert_intermediate_size: int = 16,
    dense_intermediate_size: int = 48,
    shared_expert_intermediate_size: int | None = 24,
    moe_layer_freq: tuple[int, ...] = (1, 0, 1),
    clip_qkv: float | None = 1.0,
    expert_bias: bool = True,
    chars: str = DEFAULT_CHARS,
    init_std: float = 0.5,
) -> Path:
    """A random-weight LLaDA-MoE checkpoint: every published feature on (dense and MoE layers, shared expert,
    expert bias, qk-norm, a ``clip_qkv`` the random activations reach)."""
    tokenizer = build_char_tokenizer(chars, "llada")
    cfg = moe_hf_config(
        tokenizer, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads, num_experts=num_experts,
        top_k=top_k, expert_intermediate_size=expert_intermediate_size,
        dense_intermediate_size=dense_intermediate_size, shared_expert_intermediate_size=shared_expert_intermediate_size,
        moe_layer_freq=list(moe_layer_freq), clip_qkv=clip_qkv, expert_bias=expert_bias,
    )
    model = MoEDiffusionLM(MoEConfig.from_hf_config(cfg))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in published_parameters(model):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * standard_normal(p.shape, gen))
            else:
                p.copy_(standard_normal(p.shape, gen) * init_std / p.shape[-1] ** 0.5)
        for _, b in model.named_buffers():  # the expert biases: large enough to change some choices
            b.copy_(0.05 * standard_normal(b.shape, gen))
    return save_checkpoint(model, tokenizer, directory, cfg)


def standard_normal(shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
    """float32 normal draws that are the same under every ATEN_CPU_CAPABILITY: Box-Muller in float64 from uniform
    draws (``torch.randn``'s vectorised CPU path gives other bits per SIMD width, so the weights, and goldens recorded
    on them, would depend on the CPU)."""
    u = torch.rand((2, *shape), generator=gen, dtype=torch.float64)
    return (torch.sqrt(-2.0 * torch.log1p(-u[0])) * torch.cos(2.0 * torch.pi * u[1])).float()
