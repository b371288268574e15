"""Sparse-dLLM storage (:class:`PrunedKVCache`): a block's pruned K/V of the rest of the canvas.

The forward that fills it is a full forward (it attends over every position, as a plain forward does); in each
layer it scores every position outside the block by the block queries' mean (head-mean of mean-query . key after
RoPE), max-pools the scores over neighbouring positions, and keeps the top ``keep_ratio`` share of them
(:func:`kept_positions`), in score order. The forwards after it query the block against those kept keys and
values followed by the block's own fresh ones; nothing of the block is stored.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from ..network import Block, LayerContext, apply_rope


def block_importance(q_block: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Importance [B, N] of keys [B, Hkv, N, D] to the block queries [B, H, n, D] (both after RoPE): the
    head-mean of (mean block query) . key, unscaled."""
    if keys.shape[1] != q_block.shape[1]:
        keys = keys.repeat_interleave(q_block.shape[1] // keys.shape[1], dim=1)
    mean_q = q_block.mean(dim=-2)
    return torch.matmul(mean_q.unsqueeze(-2), keys.transpose(-2, -1)).squeeze(-2).mean(dim=1)


def kept_positions(importance: torch.Tensor, keep_ratio: float, kernel_size: int | None,
                   valid: torch.Tensor | None = None) -> torch.Tensor:
    """Indices [B, int(N * keep_ratio)] into the N scored positions, highest importance first: the importance
    max-pooled over ``kernel_size`` neighbours (stride 1, same length) first when given; ``valid`` [B, N] False
    (left padding) ranks last."""
    if kernel_size is not None:
        importance = F.max_pool1d(importance.unsqueeze(1), kernel_size=kernel_size, stride=1,
                                  padding=kernel_size // 2).squeeze(1)
    if valid is not None:
        importance = importance.masked_fill(~valid, float("-inf"))
    keep = int(importance.shape[-1] * keep_ratio)
    return torch.topk(importance, k=keep, dim=-1).indices


class PrunedKVCache:
    """Per layer, K (after RoPE) and V of the kept positions outside the block [lo, hi) (canvas coordinates).

    The first forward must be a full one (it prunes); later forwards are the block's span."""

    def __init__(self, block: tuple[int, int], keep_ratio: float, kernel_size: int | None) -> None:
        self.block = block
        self.keep_ratio = keep_ratio
        self.kernel_size = kernel_size
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.key_masks: list[torch.Tensor] = []  # [B, keep] per layer, with left padding only
        self.ids: torch.Tensor | None = None
        self.length = 0
        self._full = False

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        if self.ids is None:
            raise RuntimeError("the pruned cache is empty: run the full forward that prunes first")
        return self.ids[:, lo:hi]

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int, read_only: int = 0,
              positions: torch.Tensor | None = None) -> None:
        t = input_ids.shape[1]
        lo, hi = self.block
        if positions is not None or read_only:
            raise RuntimeError("the pruned cache runs a full forward or its block's span")
        if self.ids is None:
            if start != 0 or t != canvas_length:
                raise RuntimeError(f"the pruned cache is empty: the first forward must cover the whole canvas "
                                   f"[0, {canvas_length}), got [{start}, {start + t})")
            if not 0 <= lo < hi <= canvas_length:
                raise ValueError(f"block [{lo}, {hi}) is not inside the canvas of length {canvas_length}")
            self.ids = input_ids.clone()
            self.length = canvas_length
            self._full = True
        elif (start, start + t) != self.block or canvas_length != self.length:
            raise RuntimeError(f"the pruned cache serves the block [{lo}, {hi}) of a canvas of {self.length}; "
                               f"got [{start}, {start + t}) of {canvas_length}")
        else:
            self.ids[:, start : start + t] = input_ids
            self._full = False

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        q, k, v = block.qkv(h)
        k = apply_rope(k, *ctx.query_rope())
        if self._full:
            attn = block.attend(q, k, v, ctx, keys_rotated=True)
            self._prune(q, k, v, ctx)
        else:
            keys = torch.cat([self.keys[i], k], dim=2)
            values = torch.cat([self.values[i], v], dim=2)
            mask = None
            if ctx.key_mask is not None:
                mask = torch.cat([self.key_masks[i], ctx.key_mask[:, ctx.start : ctx.start + ctx.length]], dim=1)
            attn = block.attend(q, keys, values, dataclasses.replace(ctx, key_mask=mask), keys_rotated=True)
        h = h + attn
        return h + block.ffn(h)

    def _prune(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: LayerContext) -> None:
        lo, hi = self.block
        q_block = apply_rope(q[:, :, lo:hi], *ctx.query_rope(torch.arange(lo, hi, device=q.device).expand(q.shape[0], -1)))
        rest = torch.cat([torch.arange(lo, device=q.device), torch.arange(hi, k.shape[2], device=q.device)])
        keys, values = k[:, :, rest], v[:, :, rest]
        valid = None if ctx.key_mask is None else ctx.key_mask[:, rest]
        kept = kept_positions(block_importance(q_block, keys), self.keep_ratio, self.kernel_size, valid)
        index = kept[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[-1])
        self.keys.append(keys.gather(2, index))
        self.values.append(values.gather(2, index))
        if valid is not None:
            self.key_masks.append(valid.gather(1, kept))

    def keep_rows(self, rows: torch.Tensor) -> None:
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        self.key_masks = [m[rows] for m in self.key_masks]
        if self.ids is not None:
            self.ids = self.ids[rows]
