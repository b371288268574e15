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
- dispatch without host reads: the (token, slot) pairs sorted by expert run through one grouped product per
  projection (:class:`Experts`, the experts' weights stacked [E, out, in]; ``torch._grouped_mm`` with the group
  offsets on the device), and each token's k outputs are summed in ascending expert order, the published loop's
  order, so the bits are the published block's with no Python loop over experts and no ``.tolist()``;
- a shared expert, when the config names a size, added after the routed ones.

Caches work unchanged: :class:`MoEBlock` keeps the ``qkv`` / ``value`` / ``attend`` / ``ffn`` pieces that
:mod:`dllm_bench.models.cache` calls.
"""

from __future__ import annotations

from collections.abc import Iterator
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


class Experts(nn.Module):
    """A MoE layer's experts, stacked: ``gate_proj``/``up_proj`` [E, hidden, d] and ``down_proj`` [E, d, hidden].

    ``state_dict`` / ``load_state_dict`` speak the published per-expert names (``{e}.gate_proj.weight``); the
    forward takes rows already grouped by expert with the groups' end offsets on the device (no host read).
    """

    def __init__(self, num_experts: int, d: int, hidden: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.gate_proj = nn.Parameter(torch.empty(num_experts, hidden, d))
        self.up_proj = nn.Parameter(torch.empty(num_experts, hidden, d))
        self.down_proj = nn.Parameter(torch.empty(num_experts, d, hidden))
        for w in (self.gate_proj, self.up_proj, self.down_proj):  # nn.Linear's initialisation, expert by expert
            for e in range(num_experts):
                nn.init.kaiming_uniform_(w.data[e], a=5**0.5)
        self._register_state_dict_hook(_split_experts)
        self._register_load_state_dict_pre_hook(_stack_experts, with_module=True)

    def forward(self, x: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """down(silu(gate(x)) * up(x)) for rows ``x`` [M, d] grouped by expert; ``ends`` [E] group end offsets."""
        h = F.silu(grouped_linear(x, self.gate_proj, ends)) * grouped_linear(x, self.up_proj, ends)
        return grouped_linear(h, self.down_proj, ends)

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Expert ``e`` alone on rows x [N, d] (a reference for tests)."""
        return F.linear(F.silu(F.linear(x, self.gate_proj[e])) * F.linear(x, self.up_proj[e]), self.down_proj[e])


_EXPERT_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def _split_experts(module: Experts, state_dict: dict, prefix: str, local_metadata: Any) -> dict:
    stacked = {name: state_dict.pop(prefix + name) for name in _EXPERT_PROJECTIONS}
    for e in range(module.num_experts):  # expert by expert, the published file's order
        for name in _EXPERT_PROJECTIONS:
            state_dict[f"{prefix}{e}.{name}.weight"] = stacked[name][e]
    return state_dict


def published_parameters(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``named_parameters()`` as the published module tree has them: each stacked expert weight as its experts'
    views (``experts.{e}.gate_proj.weight``), expert by expert."""
    stacked: list[tuple[str, str, torch.Tensor]] = []
    for name, p in model.named_parameters():
        prefix, _, leaf = name.rpartition(".")
        if not (leaf in _EXPERT_PROJECTIONS and prefix.rpartition(".")[2] == "experts"):
            yield name, p
            continue
        stacked.append((prefix, leaf, p))
        if len(stacked) == len(_EXPERT_PROJECTIONS):
            for e in range(p.shape[0]):
                for prefix, leaf, w in stacked:
                    yield f"{prefix}.{e}.{leaf}.weight", w[e]
            stacked = []


def _stack_experts(module: Experts, state_dict: dict, prefix: str, *args: Any) -> None:
    for name in _EXPERT_PROJECTIONS:
        keys = [f"{prefix}{e}.{name}.weight" for e in range(module.num_experts)]
        if all(k in state_dict for k in keys):  # else the loader reports the missing names
            state_dict[prefix + name] = torch.stack([state_dict.pop(k) for k in keys])


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Rows of ``x`` [M, in] grouped by expert (group e ends at ``ends[e]``) times their expert's ``weight`` [E, out,
    in] transposed: [M, out], each group's rows as ``F.linear`` gives them. One grouped product where torch has it
    for these shapes (16-byte-aligned strides), else every expert over every row and each row's own picked (E times
    the work, still without a host read)."""
    if _grouped_mm_fits(x, weight):
        return torch._grouped_mm(x, weight.transpose(1, 2), offs=ends.to(torch.int32))
    expert_of_row = torch.searchsorted(ends, torch.arange(x.shape[0], device=x.device), right=True)
    every = torch.einsum("mi,eoi->emo", x, weight)
    return every[expert_of_row.clamp(max=weight.shape[0] - 1), torch.arange(x.shape[0], device=x.device)]


def _grouped_mm_fits(x: torch.Tensor, weight: torch.Tensor) -> bool:
    if not hasattr(torch, "_grouped_mm") or x.dtype != weight.dtype or x.shape[0] == 0:
        return False
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return False
    if x.device.type == "cuda" and not (x.dtype == torch.bfloat16 and torch.cuda.get_device_capability(x.device)[0] >= 9):
        return False
    size = x.element_size()
    return all(n * size % 16 == 0 for n in (weight.shape[1], weight.shape[2]))



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
            self.experts = Experts(cfg.num_experts, d, cfg.expert_intermediate_size)
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
        """Top-k mixture [N, d] of the experts for normed tokens x [N, d], without a host read."""
        n_tok, n_exp, k = x.shape[0], self.experts.num_experts, self.top_k
        probs = F.softmax(self.gate(x), dim=1, dtype=torch.float)
        if self.expert_bias is not None:
            probs = probs + self.expert_bias  # the published block adds it to the weights as well as the choice
        weights, chosen = torch.topk(probs, k, dim=-1)
        weights = weights.to(x.dtype)
        # (slot, token) pairs grouped by expert; within an expert slot-major then by token, as the published loop
        slots = chosen.t().reshape(-1)
        order = torch.argsort(slots, stable=True)
        tokens = torch.arange(n_tok, device=x.device).repeat(k).index_select(0, order)
        # group sizes by a scatter (bincount sizes its output from the data: a host read on an accelerator)
        ends = torch.zeros(n_exp, dtype=torch.long, device=x.device).scatter_add_(0, slots, torch.ones_like(slots)).cumsum(0)
        pair_out = self.experts(x.index_select(0, tokens), ends) * weights.t().reshape(-1).index_select(0, order)[:, None]
        # each token's outputs in ascending expert order (a pair's rank among its token's k experts): the published
        # loop adds them expert by expert into zeros, and that order fixes the rounding
        rank = chosen.argsort(dim=1).argsort(dim=1).t().reshape(-1).index_select(0, order)
        ranked = torch.empty_like(pair_out).index_copy_(0, rank * n_tok + tokens, pair_out).view(k, n_tok, -1)
        out = ranked[0]
        for j in range(1, k):
            out = out + ranked[j]
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

