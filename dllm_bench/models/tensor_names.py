"""Checkpoint tensor names: our canonical parameter names <-> the names a published checkpoint stores.

The networks name their parameters once (``layers.3.q_proj.weight``); ``state_dict()`` and ``load_state_dict``
speak the checkpoint's names through the hooks here, so a saved model is a checkpoint in the published format.
Dense LLaDA / Dream have two schemes (OLMo's for LLaDA, Llama's for Dream/Qwen2); LLaDA-MoE has its own layout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

# canonical parameter name -> checkpoint tensor name, per naming scheme ("{i}" = layer index)
_LAYER_NAMES = {
    "olmo": {
        "attn_norm.weight": "model.transformer.blocks.{i}.attn_norm.weight",
        "q_proj.weight": "model.transformer.blocks.{i}.q_proj.weight",
        "q_proj.bias": "model.transformer.blocks.{i}.q_proj.bias",
        "k_proj.weight": "model.transformer.blocks.{i}.k_proj.weight",
        "k_proj.bias": "model.transformer.blocks.{i}.k_proj.bias",
        "v_proj.weight": "model.transformer.blocks.{i}.v_proj.weight",
        "v_proj.bias": "model.transformer.blocks.{i}.v_proj.bias",
        "o_proj.weight": "model.transformer.blocks.{i}.attn_out.weight",
        "ffn_norm.weight": "model.transformer.blocks.{i}.ff_norm.weight",
        "gate_proj.weight": "model.transformer.blocks.{i}.ff_proj.weight",
        "up_proj.weight": "model.transformer.blocks.{i}.up_proj.weight",
        "down_proj.weight": "model.transformer.blocks.{i}.ff_out.weight",
    },
    "llama": {
        "attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
        "q_proj.weight": "model.layers.{i}.self_attn.q_proj.weight",
        "q_proj.bias": "model.layers.{i}.self_attn.q_proj.bias",
        "k_proj.weight": "model.layers.{i}.self_attn.k_proj.weight",
        "k_proj.bias": "model.layers.{i}.self_attn.k_proj.bias",
        "v_proj.weight": "model.layers.{i}.self_attn.v_proj.weight",
        "v_proj.bias": "model.layers.{i}.self_attn.v_proj.bias",
        "o_proj.weight": "model.layers.{i}.self_attn.o_proj.weight",
        "q_norm.weight": "model.layers.{i}.self_attn.q_norm.weight",  # Qwen3 (SDAR)
        "k_norm.weight": "model.layers.{i}.self_attn.k_norm.weight",
        "ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
        "gate_proj.weight": "model.layers.{i}.mlp.gate_proj.weight",
        "up_proj.weight": "model.layers.{i}.mlp.up_proj.weight",
        "down_proj.weight": "model.layers.{i}.mlp.down_proj.weight",
    },
}
_TOP_NAMES = {
    "olmo": {
        "embed.weight": "model.transformer.wte.weight",
        "norm.weight": "model.transformer.ln_f.weight",
        "lm_head.weight": "model.transformer.ff_out.weight",
    },
    "llama": {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight", "lm_head.weight": "lm_head.weight"},
}

# LLaDA-MoE: our layer-module prefix -> the checkpoint's (model.layers.{i}.<prefix>...)
_MOE_LAYER_PREFIXES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
    "o_proj": "self_attn.o_proj", "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm",
    "gate": "mlp.gate", "experts": "mlp.experts", "expert_bias": "mlp.expert_bias",
    "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "down_proj": "mlp.down_proj",
    "shared_expert": "shared_expert",
}
_MOE_TOP_NAMES = _TOP_NAMES["llama"]


def checkpoint_name(canonical: str, naming: str) -> str:
    """Map our parameter name (``layers.3.q_proj.weight``) to the checkpoint's tensor name."""
    if canonical in _TOP_NAMES[naming]:
        return _TOP_NAMES[naming][canonical]
    _, idx, rest = canonical.split(".", 2)
    return _LAYER_NAMES[naming][rest].format(i=idx)


def canonical_name(ckpt: str, naming: str) -> str | None:
    """Inverse of :func:`checkpoint_name`; None for a name that the scheme does not have."""
    for canon, name in _TOP_NAMES[naming].items():
        if ckpt == name:
            return canon
    for canon, pattern in _LAYER_NAMES[naming].items():
        head, tail = pattern.split("{i}")
        if ckpt.startswith(head) and ckpt.endswith(tail):
            idx = ckpt[len(head) : len(ckpt) - len(tail)]
            if idx.isdigit():
                return f"layers.{idx}.{canon}"
    return None


def layered_checkpoint_name(canonical: str, top: dict[str, str], prefixes: dict[str, str]) -> str:
    """A ``model.layers.{i}.*`` layout's name: a top-level tensor from ``top``, a layer's from our module prefix
    -> its prefix (``layers.3.experts.5.up_proj.weight`` -> ``model.layers.3.mlp.experts.5.up_proj.weight``)."""
    if canonical in top:
        return top[canonical]
    _, idx, rest = canonical.split(".", 2)
    head, _, tail = rest.partition(".")
    return f"model.layers.{idx}.{prefixes[head]}" + (f".{tail}" if tail else "")


def layered_canonical_name(ckpt: str, top: dict[str, str], prefixes: dict[str, str]) -> str | None:
    """Inverse of :func:`layered_checkpoint_name`; None for a name the layout does not have."""
    for canon, name in top.items():
        if ckpt == name:
            return canon
    if not ckpt.startswith("model.layers."):
        return None
    idx, _, rest = ckpt[len("model.layers."):].partition(".")
    if not idx.isdigit():
        return None
    for ours, theirs in sorted(prefixes.items(), key=lambda kv: -len(kv[1])):
        if rest == theirs or rest.startswith(theirs + "."):
            return f"layers.{idx}.{ours}{rest[len(theirs):]}"
    return None


def moe_checkpoint_name(canonical: str) -> str:
    """``layers.3.experts.5.up_proj.weight`` -> ``model.layers.3.mlp.experts.5.up_proj.weight``."""
    return layered_checkpoint_name(canonical, _MOE_TOP_NAMES, _MOE_LAYER_PREFIXES)


def moe_canonical_name(ckpt: str) -> str | None:
    """Inverse of :func:`moe_checkpoint_name`; None for a name the layout does not have."""
    return layered_canonical_name(ckpt, _MOE_TOP_NAMES, _MOE_LAYER_PREFIXES)


def speak_checkpoint_names(module: nn.Module, to_checkpoint: Callable[[nn.Module, str], str],
                           to_canonical: Callable[[nn.Module, str], str | None]) -> None:
    """Make ``module.state_dict()`` / ``load_state_dict`` use checkpoint names: ``to_checkpoint(module,
    canonical)`` and ``to_canonical(module, name)`` (None leaves the key for the loader to report)."""

    def save_hook(mod: nn.Module, state_dict: dict, prefix: str, local_metadata: Any) -> dict:
        for key in list(state_dict):
            if key.startswith(prefix):
                state_dict[prefix + to_checkpoint(mod, key[len(prefix):])] = state_dict.pop(key)
        return state_dict

    def load_hook(mod: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
        for key in list(state_dict):
            canon = to_canonical(mod, key[len(prefix):]) if key.startswith(prefix) else None
            if canon is not None:
                state_dict[prefix + canon] = state_dict.pop(key)

    module._register_state_dict_hook(save_hook)
    module._register_load_state_dict_pre_hook(load_hook, with_module=True)


def speak_dense_names(module: nn.Module) -> None:
    """:func:`speak_checkpoint_names` for a dense LLaDA / Dream network, in its ``config.tensor_naming``."""
    speak_checkpoint_names(module, lambda m, c: checkpoint_name(c, m.config.tensor_naming),
                           lambda m, n: canonical_name(n, m.config.tensor_naming))


def speak_moe_names(module: nn.Module) -> None:
    """:func:`speak_checkpoint_names` for a LLaDA-MoE network."""
    speak_checkpoint_names(module, lambda m, c: moe_checkpoint_name(c), lambda m, n: moe_canonical_name(n))
