"""A tied LM head (``tie_word_embeddings``): the head is the embedding matrix, and the checkpoint stores only the
embedding (Qwen2.5-1.5B, so Fast-dLLM v2 1.5B; iLLaDA-8B). One helper for every network that has ``embed`` and
``lm_head``."""

from __future__ import annotations

from typing import Any

from torch import nn

_EMBED_NAMES = ("model.embed_tokens.weight", "model.word_embeddings.weight", "embed.weight")


def tie_head(model: nn.Module) -> None:
    """Make ``model.lm_head`` share ``model.embed``'s weight; ``state_dict`` drops ``lm_head.weight`` and
    ``load_state_dict`` fills it from the embedding (and ties again after ``assign=True`` replaced both)."""
    model.lm_head.weight = model.embed.weight
    model._register_state_dict_hook(_drop_head)
    model._register_load_state_dict_pre_hook(_fill_head)
    model.register_load_state_dict_post_hook(_retie)


def _drop_head(module: nn.Module, state_dict: dict, prefix: str, local_metadata: Any) -> dict:
    state_dict.pop(prefix + "lm_head.weight", None)
    return state_dict


def _fill_head(state_dict: dict, prefix: str, *args: Any) -> None:
    for name in _EMBED_NAMES:
        if prefix + name in state_dict and prefix + "lm_head.weight" not in state_dict:
            state_dict[prefix + "lm_head.weight"] = state_dict[prefix + name]


def _retie(module: nn.Module, incompatible_keys: Any) -> None:
    module.lm_head.weight = module.embed.weight
