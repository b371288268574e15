"""D2F's training objective (Discrete Diffusion Forcing, the LoRA it ships on LLaDA and Dream), on the tiny task.

The answer is cut into blocks of ``block_size`` from the prompt's end (the anchored grid); block k is masked with a
ratio p_k that never decreases along the answer (the first drawn in [0.2, 0.7), the rest adding non-negative steps
that end at most at 0.7), so a later block is at least as noisy as the ones before it. One forward under the
block-causal mask (the prompt attends the prompt, a block its own block, the blocks before it and the prompt) sees
the noisy earlier blocks, not clean ones: the decoder's pipeline has partly decoded blocks before the current one.
The loss is the cross-entropy on masked answer tokens weighted by 1 / p, averaged over those tokens; its targets are
the base model's own distributions (the adapter off, full attention over the same noisy sequence: D2F's
``self_align``) or the answer tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

P_FIRST_LOW, P_FIRST_HIGH, P_LAST_MAX = 0.2, 0.7, 0.7


def monotonic_block_ratios(batch: int, n_blocks: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """[B, n_blocks] masking ratios: p_0 ~ U(0.2, 0.7), then p_k = p_0 + the sum of k steps each ~ U(0, 1) *
    (0.7 - p_0) / (n_blocks - 1), so that the ratios never decrease and stay below 0.7."""
    first = torch.rand(batch, 1, generator=generator) * (P_FIRST_HIGH - P_FIRST_LOW) + P_FIRST_LOW
    if n_blocks == 1:
        return first
    steps = torch.rand(batch, n_blocks - 1, generator=generator) * (P_LAST_MAX - first) / (n_blocks - 1)
    return torch.cat([first, first + steps.cumsum(dim=1)], dim=1).clamp(max=1.0)


def mask_answer_blocks(answers: torch.Tensor, mask_token_id: int, block_size: int,
                       generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(noisy answers [B, G], masked [B, G] bool, p [B, G]): each answer block of ``block_size`` from the answer's
    start (the last one possibly shorter) masked with its own ratio (:func:`monotonic_block_ratios`)."""
    if block_size < 1:
        raise ValueError(f"block_size={block_size}: must be >= 1")
    batch, length = answers.shape
    block_of = torch.arange(length) // block_size
    p_mask = monotonic_block_ratios(batch, int(block_of[-1]) + 1, generator)[:, block_of]
    masked = torch.rand(batch, length, generator=generator) < p_mask
    noisy = torch.where(masked, torch.full_like(answers, mask_token_id), answers)
    return noisy, masked, p_mask


def d2f_loss(logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor, p_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the masked answer tokens of cross-entropy / p. ``logits`` [B, G, V] (logits at i predict token i);
    ``targets`` answer ids [B, G] or distributions [B, G, V]."""
    target = targets[masked] if targets.dtype == torch.long else targets[masked].float()
    ce = F.cross_entropy(logits[masked].float(), target, reduction="none")
    return (ce / p_mask[masked]).sum() / masked.sum().clamp(min=1)
