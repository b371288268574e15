"""Token-count schedules of the fixed-step baselines (LLaDA blocks, Dream timesteps)."""

from __future__ import annotations

import torch


def llada_transfer_counts(num_masks: torch.Tensor, steps: int) -> torch.Tensor:
    """LLaDA's per-step commit counts [B, steps]: M // s each, the first M % s steps one more."""
    if steps <= 0:
        raise ValueError(f"steps per block must be >= 1, got {steps}")
    num_masks = num_masks.reshape(-1, 1).to(torch.int64)
    base = num_masks // steps
    remainder = num_masks % steps
    step_index = torch.arange(steps, device=num_masks.device).unsqueeze(0)
    return base + (step_index < remainder).to(torch.int64)


def dream_timesteps(steps: int, eps: float = 1e-3) -> torch.Tensor:
    """Dream's ``linspace(1, eps, steps + 1)`` diffusion times (float32, as the published code)."""
    if steps <= 0:
        raise ValueError(f"Dream steps must be >= 1, got {steps}")
    return torch.linspace(1, eps, steps + 1)


def dream_step_ratios(steps: int, eps: float = 1e-3, device: torch.device | str | None = None) -> torch.Tensor:
    """1 - s/t per step [steps] (float32), from the CPU's ``linspace`` whatever the device, moved there once: a
    CUDA ``linspace`` may round a time differently and move ``int(#mask * (1 - s/t))``; the float32 product
    and the cast to int that use these ratios are exact operations, so a decode counts the same on every
    device."""
    times = dream_timesteps(steps, eps)
    return (1 - times[1:] / times[:-1]).to(device)


def dream_transfer_count(num_masks: torch.Tensor, step: torch.Tensor, steps: int, eps: float = 1e-3,
                         ratios: torch.Tensor | None = None) -> torch.Tensor:
    """Dream's commit count at step i: int(#mask * (1 - s/t)), all remaining masks at the last step.

    ``num_masks`` and ``step`` are per-row [B] tensors (the published code uses the batch total); ``ratios``
    is :func:`dream_step_ratios` on their device (made here when not given).
    """
    ratios = dream_step_ratios(steps, eps, num_masks.device) if ratios is None else ratios
    ratio = ratios[step.clamp(max=steps - 1)]
    counts = (num_masks.to(torch.float32) * ratio).to(torch.int64)
    return torch.where(step >= steps - 1, num_masks.to(torch.int64), counts)


def dream_transfer_probability(step: torch.Tensor, steps: int, eps: float = 1e-3,
                               ratios: torch.Tensor | None = None) -> torch.Tensor:
    """Per-position commit probability of Dream's 'origin' algorithm: 1 - s/t, 1 at the last step."""
    ratios = dream_step_ratios(steps, eps, step.device) if ratios is None else ratios
    ratio = ratios[step.clamp(max=steps - 1)]
    return torch.where(step >= steps - 1, torch.ones_like(ratio), ratio)
