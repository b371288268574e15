"""LLaDA2.x (BailingMoeV2, ``architectures ["LLaDA2MoeModelLM"]``): a block-diffusion MoE, in one readable file.

What differs from :class:`~dllm_bench.models.network.Block`, as the published ``modeling_llada2_moe.py`` computes it
(inclusionAI LLaDA2.0; copies in czg1225/DMax ``dFactory/models/llada2_moe/``):

- attention: one fused projection ``query_key_value`` [(H + 2 Hkv) * D, d] split per head into q, k, v; an RMSNorm
  over each head of q and of k (``query_layernorm`` / ``key_layernorm``); partial RoPE: the first
  ``head_dim * partial_rotary_factor`` dimensions of each head rotate (in the model dtype), the rest pass; output
  ``dense``; no biases;
- the MLP: dense SwiGLU in the first ``first_k_dense_replace`` layers, then a MoE: the router (``gate``) runs in
  float32, scores are sigmoids, the choice adds the expert bias and keeps the ``topk_group`` best of ``n_group``
  groups (a group's score: its two best experts) before the top-k; the weights are the chosen experts' scores
  without the bias, normalised to sum 1 and times ``routed_scaling_factor``; each token's k expert outputs are
  weighted and summed in float32 in the router's order, then cast back; a shared expert of ``moe_intermediate_size
  * num_shared_experts`` is added;
- block-causal attention on the absolute grid (block 32, :mod:`.blocks`), unshifted prediction, mask 156895.

Experts are :class:`~dllm_bench.models.moe.Experts` (stacked weights, one grouped product per projection, the
group offsets on the device: no host read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig, ModelConfigError, _looks_instruct
from .cpu_linear import Linear
from .moe import Experts, SwiGLU
from .network import Block, DiffusionLM, RMSNorm
from .tensor_names import layered_canonical_name, layered_checkpoint_name, speak_checkpoint_names

LLADA2_ARCHITECTURES = ("LLaDA2MoeModelLM",)
LLADA2_MASK_ID = 156895  # <|mask|> of the LLaDA2 tokenizer (the published samplers' mask_id)
LLADA2_BLOCK = 32  # the published samplers' block_length


@dataclass
class LLaDA2Config(ModelConfig):
    """:class:`ModelConfig` (``mlp_hidden_size``: the dense layers') plus the expert layout and routing."""

    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_k_dense_replace: int = 0
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    partial_rotary_factor: float = 1.0
    qk_norm: bool = True

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)


def llada2_config(raw: dict[str, Any], name_or_path: str = "") -> LLaDA2Config:
    """Parse a LLaDA2 ``config.json``; refuse, naming the key, what the published network does not do."""
    where = f"config.json of {name_or_path or '<config>'}"

    def need(key: str) -> Any:
        if raw.get(key) is None:
            raise ModelConfigError(f"{where} lacks {key}")
        return raw[key]

    def refuse(key: str, allowed: str) -> None:
        raise ModelConfigError(f"{where} has {key}={raw.get(key)!r}; the LLaDA2 network supports {allowed}")

    for key in ("use_qkv_bias", "use_bias", "tie_word_embeddings", "norm_head", "use_sliding_window"):
        if raw.get(key):
            refuse(key, "false")
    if raw.get("rope_scaling") is not None:
        refuse("rope_scaling", "null")
    if raw.get("hidden_act", "silu") != "silu":
        refuse("hidden_act", "'silu'")
    if raw.get("score_function", "sigmoid") != "sigmoid":
        refuse("score_function", "'sigmoid'")
    if raw.get("router_dtype", "fp32") != "fp32":
        refuse("router_dtype", "'fp32'")
    if raw.get("use_rmsnorm") is False:
        refuse("use_rmsnorm", "true")
    n_experts, n_group = int(need("num_experts")), int(raw.get("n_group") or 1)
    if n_experts % n_group:
        refuse("n_group", f"a divisor of num_experts {n_experts}")
    topk_group = int(raw.get("topk_group") or n_group)
    if not 1 <= topk_group <= n_group:
        refuse("topk_group", f"1..n_group ({n_group})")
    n_heads = int(need("num_attention_heads"))
    eos = int(raw["eos_token_id"]) if raw.get("eos_token_id") is not None else int(need("pad_token_id"))
    head_dim = raw.get("head_dim")
    return LLaDA2Config(
        flavour="llada",  # masked diffusion, logits at i predict token i
        vocab_size=int(need("vocab_size")),
        d_model=int(need("hidden_size")),
        n_layers=int(need("num_hidden_layers")),
        n_heads=n_heads,
        n_kv_heads=int(raw.get("num_key_value_heads") or n_heads),
        mlp_hidden_size=int(need("intermediate_size")),
        rope_theta=float(need("rope_theta")),
        rms_norm_eps=float(need("rms_norm_eps")),
        mask_token_id=int(raw.get("mask_token_id") or LLADA2_MASK_ID),
        eos_token_id=eos,
        pad_token_id=int(raw["pad_token_id"]) if raw.get("pad_token_id") is not None else eos,
        bos_token_id=int(raw["bos_token_id"]) if raw.get("bos_token_id") is not None else None,
        rope_full_precision=False,  # the published file casts cos/sin to the model dtype
        tensor_naming="llama",
        max_sequence_length=int(raw.get("max_position_embeddings", 4096)),
        is_instruct=_looks_instruct(raw, name_or_path),
        name_or_path=name_or_path,
        raw=dict(raw),
        attention="block_causal",
        block_size=int(raw.get("block_size") or LLADA2_BLOCK),
        block_grid="absolute",
        predicts_next=False,
        head_dim_override=int(head_dim) if head_dim is not None else None,
        eot_token="<|role_end|>",
        num_experts=n_experts,
        num_experts_per_tok=int(need("num_experts_per_tok")),
        moe_intermediate_size=int(need("moe_intermediate_size")),
        num_shared_experts=int(raw.get("num_shared_experts") or 0),
        first_k_dense_replace=int(raw.get("first_k_dense_replace") or 0),
        n_group=n_group,
        topk_group=topk_group,
        routed_scaling_factor=float(raw.get("routed_scaling_factor") or 1.0),
        partial_rotary_factor=float(raw.get("partial_rotary_factor", 1.0)),
        qk_norm=raw.get("use_qk_norm", True) is not False,
    )


class Router(nn.Module):
    """Grouped sigmoid routing in float32: (expert ids [N, k], weights [N, k] float32) for tokens [N, d]."""

    def __init__(self, cfg: LLaDA2Config) -> None:
        super().__init__()
        self.top_k, self.n_group, self.topk_group = cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
        self.scale = cfg.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(cfg.num_experts, cfg.d_model))
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        self.register_buffer("expert_bias", torch.zeros(cfg.num_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = torch.sigmoid(F.linear(x.float(), self.weight.float()))
        biased = scores + self.expert_bias
        n = x.shape[0]
        group_scores = biased.view(n, self.n_group, -1).topk(2, dim=-1)[0].sum(dim=-1)
        groups = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        keep = torch.zeros_like(group_scores).scatter_(1, groups, 1).bool()
        keep = keep[:, :, None].expand(-1, -1, biased.shape[1] // self.n_group).reshape(n, -1)
        chosen = torch.topk(biased.masked_fill(~keep, float("-inf")), k=self.top_k, dim=-1)[1]
        weights = scores.gather(1, chosen)
        if self.top_k > 1:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return chosen, weights * self.scale


class LLaDA2Block(Block):
    """One LLaDA2 layer: :class:`Block`'s pieces (``qkv`` / ``value`` / ``attend`` / ``ffn``) with a fused QKV,
    qk-norm and partial RoPE (the rotary tables are ``rotary_dim`` wide), and a MoE MLP after the dense layers."""

    def __init__(self, cfg: LLaDA2Config, layer: int) -> None:
        nn.Module.__init__(self)
        d, hd = cfg.d_model, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, hd
        self.attn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.qkv_proj = Linear(d, (cfg.n_heads + 2 * cfg.n_kv_heads) * hd, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.o_proj = Linear(cfg.n_heads * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.is_moe = layer >= cfg.first_k_dense_replace
        if self.is_moe:
            self.gate = Router(cfg)
            self.experts = Experts(cfg.num_experts, d, cfg.moe_intermediate_size)
            shared = cfg.moe_intermediate_size * cfg.num_shared_experts
            self.shared_experts = SwiGLU(d, shared) if shared else None
        else:
            self.gate_proj = Linear(d, cfg.mlp_hidden_size, bias=False)
            self.up_proj = Linear(d, cfg.mlp_hidden_size, bias=False)
            self.down_proj = Linear(cfg.mlp_hidden_size, d, bias=False)

    def _split(self, h: torch.Tensor) -> list[torch.Tensor]:
        b, t, _ = h.shape
        qkv = self.qkv_proj(self.attn_norm(h)).view(b, t, self.n_heads + 2 * self.n_kv_heads, self.head_dim)
        return list(qkv.split([self.n_heads, self.n_kv_heads, self.n_kv_heads], dim=2))

    def qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = (x.transpose(1, 2) for x in self._split(h))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def value(self, h: torch.Tensor) -> torch.Tensor:
        return self._split(h)[2].transpose(1, 2)

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        x = self.ffn_norm(h)
        if not self.is_moe:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        out = self.routed(x.reshape(-1, x.shape[-1])).view_as(x)
        return out if self.shared_experts is None else out + self.shared_experts(x)

    def routed(self, x: torch.Tensor) -> torch.Tensor:
        """Weighted sum [N, d] of each token's k experts, in float32 in the router's slot order, cast back."""
        n_tok, n_exp = x.shape[0], self.experts.num_experts
        chosen, weights = self.gate(x)
        k = chosen.shape[1]
        flat = chosen.reshape(-1)  # token-major pairs (token, slot)
        order = flat.argsort()  # the published order (not a stable sort): a row's bits depend on its place
        ends = torch.zeros(n_exp, dtype=torch.long, device=x.device).scatter_add_(0, flat, torch.ones_like(flat)).cumsum(0)
        pair_out = self.experts(x.index_select(0, order // k), ends)
        by_pair = torch.empty_like(pair_out).index_copy_(0, order, pair_out).view(n_tok, k, -1)
        return (by_pair.float() * weights[..., None]).sum(dim=1).to(x.dtype)


class LLaDA2DiffusionLM(DiffusionLM):
    """LLaDA2 masked block-diffusion model; ``state_dict()`` uses the published checkpoint's tensor names."""

    def __init__(self, config: LLaDA2Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(LLaDA2Block(config, i) for i in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.rms_norm_eps)
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False)
        self.tokenizer: Any = None
        self._rope_memo = None
        speak_checkpoint_names(self, lambda m, c: llada2_checkpoint_name(c), lambda m, n: llada2_canonical_name(n))


# our layer-module prefix -> the checkpoint's (model.layers.{i}.<prefix>...)
_LAYER_PREFIXES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "qkv_proj": "attention.query_key_value", "q_norm": "attention.query_layernorm",
    "k_norm": "attention.key_layernorm", "o_proj": "attention.dense",
    "gate": "mlp.gate", "experts": "mlp.experts", "shared_experts": "mlp.shared_experts",
    "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "down_proj": "mlp.down_proj",
}
_TOP_NAMES = {"embed.weight": "model.word_embeddings.weight", "norm.weight": "model.norm.weight",
              "lm_head.weight": "lm_head.weight"}


def llada2_checkpoint_name(canonical: str) -> str:
    """``layers.3.qkv_proj.weight`` -> ``model.layers.3.attention.query_key_value.weight``."""
    return layered_checkpoint_name(canonical, _TOP_NAMES, _LAYER_PREFIXES)


def llada2_canonical_name(ckpt: str) -> str | None:
    """Inverse of :func:`llada2_checkpoint_name`; None for a name the layout does not have."""
    return layered_canonical_name(ckpt, _TOP_NAMES, _LAYER_PREFIXES)
    idx, _, rest = ckpt[len("model.layers."):].partition(".")
    if not idx.isdigit():
        return None
    for ours, theirs in sorted(_LAYER_PREFIXES.items(), key=lambda kv: -len(kv[1])):
        if rest == theirs or rest.startswith(theirs + "."):
            return f"layers.{idx}.{ours}{rest[len(theirs):]}"
    return None
