"""Qwen2 / Qwen3 block-diffusion networks: Fast-dLLM v2 (Qwen2.5 weights) and SDAR (Qwen3 with qk-norm).

Both are :class:`~dllm_bench.models.network.DiffusionLM` with the Qwen tensor layout (``model.layers.{i}.self_attn
.q_proj`` ...) and block-causal attention on an absolute block grid (:mod:`.blocks`); they differ in three places:

- Fast-dLLM v2 (``architectures ["Fast_dLLM_QwenForCausalLM"]``, ``model_type "Fast_dLLM_Qwen"``): Qwen2, q/k/v
  biases, block size ``bd_size``, shifted prediction (logits at i predict token i+1, as Dream), mask 151665; the
  1.5B model ties its LM head to the embedding;
- SDAR (``architectures ["SDARForCausalLM"]``, ``model_type "sdar"``): Qwen3, no biases, an RMSNorm over each head
  of q and of k before RoPE, ``head_dim`` named in the config, block size ``block_size``, unshifted, mask 151669.

RoPE rotates in the model dtype (both published files cast cos/sin to it), unless ``rope_full_precision``. SDAR's
norms are flash-attn's fused RMSNorm (:class:`FusedRMSNorm`: one rounding; in bf16 other bits than Qwen's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .config import ModelConfig, ModelConfigError, _looks_instruct
from .network import Block, DiffusionLM, RMSNorm

FAST_DLLM_V2_ARCHITECTURES = ("Fast_dLLM_QwenForCausalLM",)
SDAR_ARCHITECTURES = ("SDARForCausalLM",)
FAST_DLLM_V2_MASK_ID = 151665  # |<MASK>| of the Fast-dLLM v2 tokenizer (its generation code's MASK_ID)
SDAR_MASK_ID = 151669  # SDAR's config.json mask_token_id
QWEN_END_OF_TURN = "<|im_end|>"


@dataclass
class QwenConfig(ModelConfig):
    """:class:`ModelConfig` plus Qwen3's per-head q/k norm and SDAR's norm rounding."""

    qk_norm: bool = False
    # SDAR's norms are flash-attn's fused RMSNorm: the weight multiplies in float32 and the result rounds once to
    # the model dtype (Qwen's own RMSNorm rounds, then multiplies in the model dtype); the same in float32
    norm_rounds_once: bool = False


def fast_dllm_v2_config(raw: dict[str, Any], name_or_path: str = "") -> QwenConfig:
    """Parse a Fast-dLLM v2 ``config.json`` (Qwen2 keys plus ``bd_size``)."""
    return _qwen_config(raw, name_or_path, what="Fast-dLLM v2", flavour="dream", qkv_bias=True, qk_norm=False,
                        block_key="bd_size", default_block=32, mask_default=FAST_DLLM_V2_MASK_ID, predicts_next=True)


def sdar_config(raw: dict[str, Any], name_or_path: str = "") -> QwenConfig:
    """Parse an SDAR ``config.json`` (Qwen3 keys plus ``block_size`` and ``mask_token_id``)."""
    return _qwen_config(raw, name_or_path, what="SDAR", flavour="llada", qkv_bias=bool(raw.get("attention_bias")),
                        qk_norm=True, block_key="block_size", default_block=None, mask_default=SDAR_MASK_ID,
                        predicts_next=False)


def _qwen_config(raw: dict[str, Any], name_or_path: str, *, what: str, flavour: str, qkv_bias: bool, qk_norm: bool,
                 block_key: str, default_block: int | None, mask_default: int, predicts_next: bool) -> QwenConfig:
    where = f"config.json of {name_or_path or '<config>'}"

    def need(key: str) -> Any:
        if raw.get(key) is None:
            raise ModelConfigError(f"{where} lacks {key}")
        return raw[key]

    for key, allowed in (("rope_scaling", (None,)), ("use_sliding_window", (None, False)),
                         ("hidden_act", (None, "silu"))):
        if raw.get(key) not in allowed:
            raise ModelConfigError(f"{where} has {key}={raw[key]!r}, which the {what} network does not compute; "
                              f"allowed: {[a for a in allowed if a is not None] or 'null'}")
    block = raw.get(block_key, default_block)
    if not isinstance(block, int) or block <= 0:
        raise ModelConfigError(f"{where} has {block_key}={block!r}; the {what} network needs a positive block size")
    eos = int(need("eos_token_id"))
    n_heads = int(need("num_attention_heads"))
    head_dim = raw.get("head_dim")
    return QwenConfig(
        flavour=flavour,
        vocab_size=int(need("vocab_size")),
        d_model=int(need("hidden_size")),
        n_layers=int(need("num_hidden_layers")),
        n_heads=n_heads,
        n_kv_heads=int(raw.get("num_key_value_heads") or n_heads),
        mlp_hidden_size=int(need("intermediate_size")),
        rope_theta=float(need("rope_theta")),
        rms_norm_eps=float(need("rms_norm_eps")),
        mask_token_id=int(raw.get("mask_token_id") or mask_default),
        eos_token_id=eos,
        pad_token_id=int(raw["pad_token_id"]) if raw.get("pad_token_id") is not None else eos,
        bos_token_id=int(raw["bos_token_id"]) if raw.get("bos_token_id") is not None else None,
        qkv_bias=qkv_bias,
        rope_full_precision=False,
        tensor_naming="llama",
        max_sequence_length=int(raw.get("max_position_embeddings", 4096)),
        is_instruct=_looks_instruct(raw, name_or_path),
        name_or_path=name_or_path,
        raw=dict(raw),
        attention="block_causal",
        block_size=block,
        block_grid="absolute",
        predicts_next=predicts_next,
        head_dim_override=int(head_dim) if head_dim is not None else None,
        eot_token=QWEN_END_OF_TURN,
        qk_norm=qk_norm,
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        norm_rounds_once=qk_norm,  # SDAR (the Qwen3 one here) imports flash-attn's rms_norm_fn for every norm
    )


class FusedRMSNorm(RMSNorm):
    """RMSNorm as flash-attn's ``rms_norm_fn`` computes it: normed x times the weight in float32, rounded once."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class QwenBlock(Block):
    """:class:`Block` with Qwen3's RMSNorm over each head of q and of k (before RoPE) when the config asks."""

    def __init__(self, cfg: QwenConfig) -> None:
        super().__init__(cfg)
        norm = FusedRMSNorm if cfg.norm_rounds_once else RMSNorm
        if cfg.norm_rounds_once:
            self.attn_norm, self.ffn_norm = norm(cfg.d_model, cfg.rms_norm_eps), norm(cfg.d_model, cfg.rms_norm_eps)
        self.q_norm = norm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = norm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None

    def qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.q_norm is None:
            return super().qkv(h)
        x = self.attn_norm(h)
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.n_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim)).transpose(1, 2)
        return q, k, self._heads(self.v_proj(x), self.n_kv_heads)


class QwenDiffusionLM(DiffusionLM):
    """Fast-dLLM v2 / SDAR network; ``state_dict()`` uses the checkpoint's names (no ``lm_head.weight`` when the
    head is tied to the embedding, as the published checkpoints store it)."""

    def __init__(self, config: QwenConfig) -> None:
        super().__init__(config)
        self.layers = nn.ModuleList(QwenBlock(config) for _ in range(config.n_layers))
        if config.norm_rounds_once:
            self.norm = FusedRMSNorm(config.d_model, config.rms_norm_eps)
