"""Block diffusion's attention topology: which block each position belongs to, and who may attend whom.

Three switches separate block-diffusion models (Fast-dLLM v2, SDAR, LLaDA2, D2F) from LLaDA / Dream; all three
are fields of :class:`~dllm_bench.models.config.ModelConfig`:

- ``attention``: ``"full"`` (every query attends every key) or ``"block_causal"`` (bidirectional inside a block,
  causal across blocks: a query attends the keys of its own block and of every earlier one);
- ``block_grid``: ``"absolute"`` (blocks tile positions 0, B, 2B, ... from the prompt's first token, so the first
  generated tokens complete the prompt's last partial block: Fast-dLLM v2, SDAR, LLaDA2) or ``"anchored"`` (the
  prompt is one block and generated blocks start at its end: D2F);
- ``shift_logits`` (prediction): logits at position i predict token i (LLaDA, SDAR, LLaDA2) or token i+1 (Dream,
  Fast-dLLM v2); the network undoes the shift, so a caller always reads "logits at i predict token i".

Block ids are computed from the rotary position ids (a row's first real token is position 0), so left padding
moves no block boundary.
"""

from __future__ import annotations

import torch

ATTENTIONS = ("full", "block_causal")
BLOCK_GRIDS = ("absolute", "anchored")


def block_ids(position_ids: torch.Tensor, block_size: int, grid: str = "absolute",
              prompt_length: torch.Tensor | int | None = None) -> torch.Tensor:
    """Block index [B, S] of every position ``position_ids`` [B, S].

    absolute: ``p // block_size``; anchored: 0 for the prompt (``p < prompt_length``, [B] or int, in position-id
    units), then ``1 + (p - prompt_length) // block_size``.
    """
    if block_size <= 0:
        raise ValueError(f"block_size {block_size} must be positive")
    if grid == "absolute":
        return torch.div(position_ids, block_size, rounding_mode="floor")
    if grid != "anchored":
        raise ValueError(f"block grid {grid!r} is not one of {BLOCK_GRIDS}")
    if prompt_length is None:
        raise ValueError("an anchored block grid needs the prompt length (block_anchor) of every row")
    anchor = torch.as_tensor(prompt_length, device=position_ids.device).reshape(-1, 1)
    after = position_ids - anchor
    return torch.where(after < 0, torch.zeros_like(after), 1 + torch.div(after, block_size, rounding_mode="floor"))


def block_causal_mask(query_blocks: torch.Tensor, key_blocks: torch.Tensor) -> torch.Tensor:
    """[B, Q, S] bool: query q may attend key k when k's block is not after q's (``block_q >= block_kv``)."""
    return query_blocks[:, :, None] >= key_blocks[:, None, :]
