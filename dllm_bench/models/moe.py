"""LLaDA-MoE: the bidirectional transformer of :mod:`network` with OLMoE-style layers, in one readable file.

Each layer differs from the dense one in three places, as in the published modeling file (inclusionAI/dInfer
``tools/modeling_fused_lladamoe.py``, the unfused ``LLaDAMoESparseMoeBlock``):

- attention: an RMSNorm over each head of q and of k (``qk_layernorm``), then q, k and v clamped to
  ``[-clip_qkv, clip_qkv]``; RoPE in the model's dtype (cos/sin are cast to it), not in float32, unless
  ``rope_full_precision`` asks for float32 (``load_model(..., rope_full_precision=True)``, as for Dream);
- the MLP of a MoE layer: router logits -> softmax in float32 -> (+ expert bias, if the checkpoint has one) ->
  top-k; the top-k probabilities are used as they are (the published block never normalises them, whatever
  ``norm_topk_prob`` says), cast to the model dtype, and each expert's weighted output is added into the
  result expert by expert, in expert order (the order fixes the rounding);
- a shared expert, when the config names a size, added after the routed ones.

Caches work unchanged: :class:`MoEBlock` keeps the ``qkv`` / ``value`` / ``attend`` / ``ffn`` pieces that
:mod:`dllm_bench.models.cache` calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig, ModelConfigError, _looks_instruct
from .cpu_linear import Linear
from .network import Block, DiffusionLM, RMSNorm
from .tensor_names import speak_moe_names

# LLaDA-MoE's config.json has no mask id; dInfer decodes with mask_id=156895, eos_id=156892
# (benchmarks/benchmark.py, tests/test_llada_moe.py @ fce4e328)
LLADA_MOE_MASK_ID = 156895
MOE_ARCHITECTURES = ("LLaDAMoEModel", "LLaDAMoEModelLM")


def is_moe_config(raw: dict[str, Any]) -> bool:
    """A LLaDA-MoE config.json (its model_type is "llada" like the dense model's, so the architecture decides)."""
    return any(a in MOE_ARCHITECTURES for a in raw.get("architectures") or []) or "num_experts" in raw


@dataclass
class MoEConfig(ModelConfig):
    """:class:`ModelConfig` plus the expert layout; ``mlp_hidden_size`` is the dense layers' size."""

    num_experts: int = 0
    num_experts_per_tok: int = 0
    expert_intermediate_size: int = 0
    shared_expert_intermediate_size: int | None = None
    moe_layer_freq: list[int] = field(default_factory=list)  # per layer: 1 = MoE MLP, 0 = dense MLP
    qk_layernorm: bool = False
    clip_qkv: float | None = None
    expert_bias: bool = False  # moe_router_enable_expert_bias

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], name_or_path: str = "") -> MoEConfig:
        """Parse a LLaDA-MoE ``config.json``; refuse, naming the key, what the published network does not do."""
        where = f"config.json of {name_or_path or '<config>'}"

        def need(key: str) -> Any:
            if cfg.get(key) is None:
                raise ModelConfigError(f"{where} lacks {key}")
            return cfg[key]

        def refuse(key: str, allowed: str) -> None:
            raise ModelConfigError(f"{where} has {key}={cfg.get(key)!r}; the LLaDA-MoE network supports {allowed}")

        if cfg.get("rope_scaling") is not None:
            refuse("rope_scaling", "null")
        if cfg.get("partial_rotary_factor", 1.0) not in (1, 1.0):
            refuse("partial_rotary_factor", "1.0")
        if cfg.get("hidden_act", "silu") != "silu":
            refuse("hidden_act", "'silu'")
        if cfg.get("tie_word_embeddings"):
            refuse("tie_word_embeddings", "false")
        if cfg.get("attention_bias"):
            refuse("attention_bias", "false")
        n_layers = int(need("num_hidden_layers"))
        freq = cfg.get("moe_layer_freq")
        if not isinstance(freq, list) or len(freq) != n_layers or any(f not in (0, 1) for f in freq):
            refuse("moe_layer_freq", f"a list of {n_layers} zeros and ones (one per layer)")
        dense = cfg.get("dense_intermediate_size")
        if 0 in freq and not (isinstance(dense, int) and dense > 0):
            refuse("dense_intermediate_size", "a positive size when a layer is dense")
        shared = cfg.get("shared_expert_intermediate_size")
        if shared is not None and not (isinstance(shared, int) and shared > 0):
            refuse("shared_expert_intermediate_size", "null or a positive size")
        n_heads = int(need("num_attention_heads"))
        eos = int(need("eos_token_id"))
        return cls(
            flavour="llada",  # masked diffusion without a logit shift, as LLaDA
            vocab_size=int(need("vocab_size")),
            d_model=int(need("hidden_size")),
            n_layers=n_layers,
            n_heads=n_heads,
            n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
            mlp_hidden_size=int(dense) if isinstance(dense, int) and dense > 0 else 0,
            rope_theta=float(need("rope_theta")),
            rms_norm_eps=float(need("rms_norm_eps")),
            mask_token_id=int(cfg.get("mask_token_id") or LLADA_MOE_MASK_ID),
            eos_token_id=eos,
            pad_token_id=int(cfg["pad_token_id"]) if cfg.get("pad_token_id") is not None else eos,
            bos_token_id=int(cfg["bos_token_id"]) if cfg.get("bos_token_id") is not None else None,
            qkv_bias=False,
            rope_full_precision=False,  # the published file casts cos/sin to the model dtype and rotates there
            tensor_naming="llama",
            max_sequence_length=int(cfg.get("max_position_embeddings", 4096)),
            name_or_path=name_or_path,
            is_instruct=_looks_instruct(cfg, name_or_path),
            raw=dict(cfg),
            num_experts=int(need("num_experts")),
            num_experts_per_tok=int(need("num_experts_per_tok")),
            expert_intermediate_size=int(need("expert_intermediate_size")),
            shared_expert_intermediate_size=shared,
            moe_layer_freq=list(freq),
            qk_layernorm=bool(cfg.get("qk_layernorm")),
            clip_qkv=float(cfg["clip_qkv"]) if cfg.get("clip_qkv") is not None else None,
            expert_bias=bool(cfg.get("moe_router_enable_expert_bias")),
        )


class SwiGLU(nn.Module):
    """One expert (or the shared expert, or a dense layer's MLP): down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = Linear(d, hidden, bias=False)
        self.up_proj = Linear(d, hidden, bias=False)
        self.down_proj = Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoEBlock(Block):
    """One LLaDA-MoE layer: :class:`Block`'s pieces with qk-norm, clipping and an expert MLP (attention and RoPE
    are :class:`Block`'s: the rotation's dtype is the config's ``rope_full_precision``, False as published)."""

    def __init__(self, cfg: MoEConfig, layer: int) -> None:
        nn.Module.__init__(self)  # Block's dense MLP is not built: a MoE layer has experts instead
        d, hd = cfg.d_model, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, hd
        self.clip_qkv = cfg.clip_qkv
        self.attn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.q_proj = Linear(d, cfg.n_heads * hd, bias=False)
        self.k_proj = Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = Linear(cfg.n_heads * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_layernorm else None
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_layernorm else None
        self.ffn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.is_moe = cfg.moe_layer_freq[layer] == 1
        self.top_k = cfg.num_experts_per_tok
        if self.is_moe:
            self.gate = Linear(d, cfg.num_experts, bias=False)  # the router
            self.experts = nn.ModuleList(SwiGLU(d, cfg.expert_intermediate_size) for _ in range(cfg.num_experts))
            self.register_buffer("expert_bias", torch.zeros(cfg.num_experts) if cfg.expert_bias else None)
            shared = cfg.shared_expert_intermediate_size
            self.shared_expert = SwiGLU(d, shared) if shared is not None else None
        else:
            self.gate_proj = Linear(d, cfg.mlp_hidden_size, bias=False)
            self.up_proj = Linear(d, cfg.mlp_hidden_size, bias=False)
            self.down_proj = Linear(cfg.mlp_hidden_size, d, bias=False)

    def _clip(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.clip_qkv is None else x.clamp(-self.clip_qkv, self.clip_qkv)

    def qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Normed projections [B, n, T, D] (no RoPE): per-head RMSNorm on q and k, then all three clipped."""
        x = self.attn_norm(h)
        q, k = self.q_proj(x), self.k_proj(x)
        if self.q_norm is not None:
            b, t, _ = q.shape
            q = self.q_norm(q.view(b, t, self.n_heads, self.head_dim)).view(b, t, -1)
            k = self.k_norm(k.view(b, t, self.n_kv_heads, self.head_dim)).view(b, t, -1)
        return (
            self._heads(self._clip(q), self.n_heads),
            self._heads(self._clip(k), self.n_kv_heads),
            self._heads(self._clip(self.v_proj(x)), self.n_kv_heads),
        )

    def value(self, h: torch.Tensor) -> torch.Tensor:
        return self._heads(self._clip(self.v_proj(self.attn_norm(h))), self.n_kv_heads)

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        """MLP output [B, T, d]: the routed experts plus the shared one (MoE layer), or a SwiGLU (dense layer)."""
        x = self.ffn_norm(h)
        if not self.is_moe:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        out = self.routed(x.reshape(-1, x.shape[-1])).view_as(x)
        return out if self.shared_expert is None else out + self.shared_expert(x)

    def routed(self, x: torch.Tensor) -> torch.Tensor:
        """Top-k mixture [N, d] of the experts for normed tokens x [N, d]."""
        n_tok, n_exp = x.shape[0], len(self.experts)
        probs = F.softmax(self.gate(x), dim=1, dtype=torch.float)
        if self.expert_bias is not None:
            probs = probs + self.expert_bias  # the published block adds it to the weights as well as the choice
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = weights.to(x.dtype)
        # (slot, token) pairs grouped by expert; within an expert slot-major then by token, as the published loop
        slots = chosen.t().reshape(-1)
        order = torch.argsort(slots, stable=True)
        tokens = torch.arange(n_tok, device=x.device).repeat(self.top_k)[order]
        pair_weights = weights.t().reshape(-1)[order]
        counts = torch.bincount(slots, minlength=n_exp).tolist()  # one host read per layer: the group sizes
        out = torch.zeros_like(x)
        lo = 0
        for expert, count in zip(self.experts, counts):
            if count:
                rows = tokens[lo : lo + count]
                out.index_add_(0, rows, expert(x[rows]) * pair_weights[lo : lo + count, None])
            lo += count
        return out


class MoEDiffusionLM(DiffusionLM):
    """LLaDA-MoE masked-diffusion model; ``state_dict()`` uses the published checkpoint's tensor names."""

    def __init__(self, config: MoEConfig) -> None:
        nn.Module.__init__(self)  # DiffusionLM's dense layers and name hooks are replaced, not built
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(MoEBlock(config, i) for i in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.rms_norm_eps)
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False)
        self.tokenizer: Any = None
        self._rope_memo = None
        speak_moe_names(self)

