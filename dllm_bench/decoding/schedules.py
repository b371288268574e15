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


def dream_transfer_count(num_masks: torch.Tensor, step: torch.Tensor, steps: int, eps: float = 1e-3) -> torch.Tensor:
    """Dream's commit count at step i: int(#mask * (1 - s/t)), all remaining masks at the last step.

    ``num_masks`` and ``step`` are per-row [B] tensors (the published code uses the batch total).
    """
    times = dream_timesteps(steps, eps).to(num_masks.device)
    i = step.clamp(max=steps - 1)
    ratio = 1 - times[i + 1] / times[i]
    counts = (num_masks.to(torch.float32) * ratio).to(torch.int64)
    return torch.where(step >= steps - 1, num_masks.to(torch.int64), counts)


def dream_transfer_probability(step: torch.Tensor, steps: int, eps: float = 1e-3) -> torch.Tensor:
    """Per-position commit probability of Dream's 'origin' algorithm: 1 - s/t, 1 at the last step."""
    times = dream_timesteps(steps, eps).to(step.device)
    i = step.clamp(max=steps - 1)
    return torch.where(step >= steps - 1, torch.ones_like(times[i]), 1 - times[i + 1] / times[i])
