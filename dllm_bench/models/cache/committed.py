"""Committed-block K/V storage (:class:`CommittedBlockCache`) for block-causal models: per layer, K and V of the
committed prefix ``[0, committed)``; a forward of the current block attends the committed keys plus its own, and
appends its K/V only when asked (:meth:`CommittedBlockCache.commit_next`).

Under block-causal attention a committed block attends nothing after it, so its K/V never change once written:
a forward over ``[committed, committed + T)`` with this storage equals recomputing the whole canvas
``[0, committed + T)`` under the block-causal mask, as long as ``committed`` is a block boundary
(tests/models/test_block_attention.py). Keys are stored after RoPE. Dream-style shifted models (Fast-dLLM v2) read
the token before the span (its state predicts the span's first token); its K/V are the stored ones.

The open block (:meth:`CommittedBlockCache.open_block`): Fast-dLLM v2's sub-block ("dual") cache. A forward over
the whole current block stores its K/V beside the committed prefix without committing them; later forwards over a
sub-span of that block overwrite their positions there and attend the committed prefix plus the whole stored block
(the positions outside the span keep the K/V of when they were last computed, as published).

What to commit and when (SDAR's extra ``store_kv`` forward, Fast-dLLM v2's ``update_past_key_values`` forward of a
finished block) is the decoding policy's decision.
"""

from __future__ import annotations

import torch

from ..network import Block, LayerContext


class CommittedBlockCache:
    """Per-layer K/V of the committed prefix (and of the open block); forwards continue at the committed end."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []  # committed, [B, Hkv, committed, D] per layer
        self.values: list[torch.Tensor] = []
        self.open_keys: list[torch.Tensor] = []  # the open block's, [B, Hkv, W, D] per layer (empty: none open)
        self.open_values: list[torch.Tensor] = []
        self.ids: torch.Tensor | None = None  # the tokens of [0, length)
        self.committed = 0
        self.open_width = 0
        self._next: str | None = None  # "commit" or "open": what the next forward does besides reading
        self._width: int | None = None  # positions of the next commit (None: its whole span)
        self._mode = "read"
        self._span = (0, 0)
        self._read_only = 0
        self._commit_end = 0

    @property
    def length(self) -> int:
        """Canvas positions the storage covers: the committed prefix and the open block."""
        return self.committed + self.open_width

    @property
    def shorter_canvas(self) -> bool:
        """Without an open block a forward's canvas ends where its span ends (DiffusionLM._canvas_length)."""
        return self.open_width == 0

    def commit_next(self, width: int | None = None) -> None:
        """The next forward (from the committed end; over the whole open block if one is open) appends its span's
        K/V and tokens to the committed prefix, and closes the open block; ``width``: only its first ``width``
        positions (D2F: the finished blocks at the front of a forward that also runs the open ones)."""
        if width is not None and (width < 1 or self.open_width):
            raise RuntimeError(f"a partial commit needs width >= 1 and no open block, got width {width} "
                               f"(open width {self.open_width})")
        self._next, self._width = "commit", width

    def open_block(self) -> None:
        """The next forward (from the committed end) stores its span's K/V as the open block, uncommitted."""
        self._next = "open"

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        """Stored tokens [B, hi - lo] (a shifted model's span forward reads the position before its span)."""
        if self.ids is None or hi > self.length:
            raise RuntimeError(f"positions [{lo}, {hi}) are not stored (stored: [0, {self.length}))")
        return self.ids[:, lo:hi]

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int, read_only: int = 0,
              positions: torch.Tensor | None = None) -> None:
        """Start a forward over ``[start, start + T)``; its first ``read_only`` positions are stored ones."""
        if positions is not None:
            raise RuntimeError("the committed-block cache runs spans that continue the committed prefix, not "
                               "per-row positions")
        lo, hi = start + read_only, start + input_ids.shape[1]
        if self.ids is not None and input_ids.shape[0] != self.ids.shape[0]:
            raise RuntimeError(f"cache holds {self.ids.shape[0]} rows; forward has {input_ids.shape[0]}")
        action, self._next = self._next, None
        width, self._width = self._width, None
        if width is not None and width > hi - lo:
            raise RuntimeError(f"a commit of {width} positions needs a span at least that long, got [{lo}, {hi})")
        whole_open = lo == self.committed and hi == self.length
        if self.open_width and action != "open" and not (action == "commit" and not whole_open):
            ok = self.committed <= lo and hi <= self.length and canvas_length == self.length
            mode = "commit" if action == "commit" else "dual"
        else:
            ok = lo == self.committed and canvas_length == hi and (action != "open" or self.open_width == 0)
            mode = action or "read"
        if not ok:
            raise RuntimeError(f"a forward with the committed-block cache must start at the committed end "
                               f"{self.committed} (or stay inside the open block [{self.committed}, {self.length})); "
                               f"got [{lo}, {hi}) on a canvas of {canvas_length}" +
                               (" (a commit covers the whole open block)" if action == "commit" else ""))
        fresh = input_ids[:, read_only:]
        kept_width = hi - lo if width is None or mode != "commit" else width
        if mode == "dual":
            self.ids[:, lo:hi] = fresh
        elif mode in ("commit", "open"):
            kept = None if self.ids is None else self.ids[:, : self.committed]
            fresh = fresh[:, :kept_width]
            self.ids = fresh.clone() if kept is None else torch.cat([kept, fresh], dim=1)
            if mode == "commit":
                self.committed, self.open_width = lo + kept_width, 0
                self.open_keys, self.open_values = [], []
            else:
                self.open_width = hi - lo
        self._mode, self._span, self._read_only = mode, (lo - self.committed, hi - self.committed), read_only
        self._commit_end = self.committed  # after a commit: the committed prefix the merge keeps

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        return block(h, ctx, kv_update=lambda k, v: self._merge(i, k, v))

    def _merge(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = k[:, :, self._read_only :], v[:, :, self._read_only :]
        if self._mode == "dual":
            a, b = self._span
            self.open_keys[i][:, :, a:b] = k
            self.open_values[i][:, :, a:b] = v
            k, v = self.open_keys[i], self.open_values[i]
        elif self._mode == "open":
            self.open_keys.append(k.clone())
            self.open_values.append(v.clone())
        if i < len(self.keys):
            k = torch.cat([self.keys[i], k], dim=2)
            v = torch.cat([self.values[i], v], dim=2)
        if self._mode == "commit":
            kept_k, kept_v = k[:, :, : self._commit_end], v[:, :, : self._commit_end]
            if i < len(self.keys):
                self.keys[i], self.values[i] = kept_k, kept_v
            else:
                self.keys.append(kept_k)
                self.values.append(kept_v)
        return k, v

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop batch rows (``rows`` = indices to keep)."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        self.open_keys = [k[rows] for k in self.open_keys]
        self.open_values = [v[rows] for v in self.open_values]
        if self.ids is not None:
            self.ids = self.ids[rows]
