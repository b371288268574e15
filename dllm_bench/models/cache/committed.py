"""Committed-block K/V storage (:class:`CommittedBlockCache`) for block-causal models: per layer, K and V of the
committed prefix ``[0, length)``; a forward of the current block attends the committed keys plus its own, and
appends its K/V only when asked (:meth:`CommittedBlockCache.commit_next`).

Under block-causal attention a committed block attends nothing after it, so its K/V never change once written:
a forward over ``[length, length + T)`` with this storage equals recomputing the whole canvas ``[0, length + T)``
under the block-causal mask, as long as ``length`` is a block boundary (tests/models/test_block_attention.py).
Keys are stored after RoPE. Dream-style shifted models (Fast-dLLM v2) read the committed token before the span
(its logits predict the span's first token); its K/V are the stored ones. What to commit and when (SDAR's extra
``store_kv`` forward, Fast-dLLM v2's ``update_past_key_values`` forward of a finished block) is the decoding
policy's decision.
"""

from __future__ import annotations

import torch

from ..network import Block, LayerContext


class CommittedBlockCache:
    """Per-layer K/V of the committed prefix; forwards continue at its end and append on request."""

    shorter_canvas = True  # a forward's canvas ends where its span ends (DiffusionLM._canvas_length)

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.ids: torch.Tensor | None = None  # the committed tokens [B, length]
        self.length = 0
        self._commit_next = False
        self._committing = False
        self._read_only = 0

    def commit_next(self) -> None:
        """The next forward appends its span's K/V (and tokens) to the committed prefix."""
        self._commit_next = True

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        """Committed tokens [B, hi - lo] (a shifted model's span forward reads position start - 1)."""
        if self.ids is None or hi > self.length:
            raise RuntimeError(f"positions [{lo}, {hi}) are not committed (committed: [0, {self.length}))")
        return self.ids[:, lo:hi]

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int, read_only: int = 0,
              positions: torch.Tensor | None = None) -> None:
        """Start a forward over ``[start, start + T)``; its first ``read_only`` positions are committed ones."""
        if positions is not None:
            raise RuntimeError("the committed-block cache runs spans that continue the committed prefix, not "
                               "per-row positions")
        t = input_ids.shape[1]
        if start + read_only != self.length or canvas_length != start + t:
            raise RuntimeError(f"a forward with the committed-block cache must cover [{self.length}, ...) after the "
                               f"committed prefix [0, {self.length}); got [{start + read_only}, {start + t}) on a "
                               f"canvas of {canvas_length}")
        if self.ids is not None and input_ids.shape[0] != self.ids.shape[0]:
            raise RuntimeError(f"cache holds {self.ids.shape[0]} rows; forward has {input_ids.shape[0]}")
        self._read_only = read_only
        self._committing, self._commit_next = self._commit_next, False
        if self._committing:
            fresh = input_ids[:, read_only:]
            self.ids = fresh.clone() if self.ids is None else torch.cat([self.ids, fresh], dim=1)
            self.length = start + t

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        return block(h, ctx, kv_update=lambda k, v: self._merge(i, k, v))

    def _merge(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = k[:, :, self._read_only :], v[:, :, self._read_only :]
        if i < len(self.keys):
            k = torch.cat([self.keys[i], k], dim=2)
            v = torch.cat([self.values[i], v], dim=2)
        if self._committing:
            if i < len(self.keys):
                self.keys[i], self.values[i] = k, v
            else:
                self.keys.append(k)
                self.values.append(v)
        return k, v

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop batch rows (``rows`` = indices to keep)."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        if self.ids is not None:
            self.ids = self.ids[rows]
