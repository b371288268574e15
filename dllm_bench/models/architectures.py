"""Which network a checkpoint's ``config.json`` builds, told by its ``architectures`` list (never its name, and not
by ``model_type`` alone: LLaDA-MoE says ``"llada"`` like the dense LLaDA).

One row per network family beyond the dense LLaDA / Dream ones (which :class:`~.config.ModelConfig` parses from
``model_type``) and LLaDA-MoE (:func:`.moe.is_moe_config`): the config parser, the network class, and the tensor
naming the checkpoint uses. Adding a model is a row here plus its module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import ModelConfig


@dataclass(frozen=True)
class Architecture:
    """A network family: ``parse(raw, name_or_path)`` -> its config, ``network(config)`` -> the module."""

    name: str
    parse: Callable[[dict[str, Any], str], ModelConfig]
    network: Callable[[Any], Any]


def _registry() -> dict[str, Architecture]:
    from .llada2 import LLADA2_ARCHITECTURES, LLaDA2DiffusionLM, llada2_config
    from .qwen import (
        FAST_DLLM_V2_ARCHITECTURES,
        SDAR_ARCHITECTURES,
        QwenDiffusionLM,
        fast_dllm_v2_config,
        sdar_config,
    )

    rows = [Architecture("fast_dllm_v2", fast_dllm_v2_config, QwenDiffusionLM),
            Architecture("sdar", sdar_config, QwenDiffusionLM),
            Architecture("llada2", llada2_config, LLaDA2DiffusionLM)]
    names = {"fast_dllm_v2": FAST_DLLM_V2_ARCHITECTURES, "sdar": SDAR_ARCHITECTURES, "llada2": LLADA2_ARCHITECTURES}
    return {arch: row for row in rows for arch in names[row.name]}


def architecture_of(raw: dict[str, Any]) -> Architecture | None:
    """The family of a config.json by its ``architectures``; None for the dense LLaDA / Dream and LLaDA-MoE."""
    registry = _registry()
    for arch in raw.get("architectures") or []:
        if arch in registry:
            return registry[arch]
    return None


def known_architectures() -> tuple[str, ...]:
    """Every ``architectures`` value this registry builds."""
    return tuple(sorted(_registry()))
