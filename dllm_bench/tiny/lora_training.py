"""Trainable LoRA on a loaded network: each target linear's weight becomes ``W + (alpha / r) B A`` (a
parametrisation, the base W frozen), and the trained pairs go out under the checkpoint's tensor names for
:func:`~dllm_bench.models.lora.save_adapter` (PEFT's format)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils import parametrize

from dllm_bench.models.tensor_names import checkpoint_name

# our module names of the attention projections (LLaDA's attn_out is our o_proj)
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


class LoRADelta(nn.Module):
    """``weight -> weight + scale * B @ A``; A drawn as PEFT draws it (Kaiming uniform, a = sqrt 5), B zero, so the
    adapted network starts as the base."""

    def __init__(self, out_features: int, in_features: int, r: int, scale: float, generator: torch.Generator) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.lora_A = nn.Parameter(torch.rand(r, in_features, generator=generator) * 2 * bound - bound)
        self.lora_B = nn.Parameter(torch.zeros(out_features, r))
        self.scale = scale

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight + self.scale * (self.lora_B @ self.lora_A)


def attach_lora(model: nn.Module, *, r: int, lora_alpha: float, seed: int,
                modules: tuple[str, ...] = ATTENTION_PROJECTIONS) -> list[nn.Parameter]:
    """Freeze ``model`` and give every layer's ``modules`` a LoRA pair; returns the trainable parameters."""
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    trainable = []
    for layer in model.layers:
        for name in modules:
            linear = getattr(layer, name)
            delta = LoRADelta(linear.out_features, linear.in_features, r, lora_alpha / r, gen)
            parametrize.register_parametrization(linear, "weight", delta)
            trainable += [delta.lora_A, delta.lora_B]
    return trainable


def lora_pairs(model: nn.Module, modules: tuple[str, ...] = ATTENTION_PROJECTIONS) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Checkpoint tensor name of each adapted weight -> its (A [r, in], B [out, r])."""
    pairs = {}
    for i, layer in enumerate(model.layers):
        for name in modules:
            delta = getattr(layer, name).parametrizations.weight[0]
            ckpt = checkpoint_name(f"layers.{i}.{name}.weight", model.config.tensor_naming)
            pairs[ckpt] = (delta.lora_A.detach().clone(), delta.lora_B.detach().clone())
    return pairs
