"""K/V storage (:class:`KVCache`): per layer, K and V of every canvas position; a forward writes its queries' K/V
in place and attends over the whole stored canvas.

K is stored after RoPE: each key is rotated once, when it is written, where the published code rotates every
stored key every step; same values. Dream's extra position before a span (for its shifted logit) is read, not
written: its K/V stay as the last full forward left them, as in the published Dream cache. Used by Fast-dLLM's
prefix and dual cache (a span) and by caches that query per-row positions (``positions``).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..network import Block, LayerContext


class KVCache:
    """Per-layer K/V of the whole canvas; a forward over ``[start, start + T)`` (or at ``positions``) overwrites
    those positions."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.ids: torch.Tensor | None = None  # the canvas tokens the stored K/V were computed from
        self.length = 0
        self._span = (0, 0)
        self._read_only = 0
        self._positions: torch.Tensor | None = None

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        """Stored canvas tokens [B, hi - lo] (Dream needs position start-1 for a span's first logits)."""
        if self.ids is None:
            raise RuntimeError("the KV cache is empty: run a full forward first")
        return self.ids[:, lo:hi]

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int, read_only: int = 0,
              positions: torch.Tensor | None = None) -> None:
        """Start a forward over ``[start, start + T)`` or at ``positions`` [B, T]; its first ``read_only`` positions
        keep their stored K/V."""
        t = input_ids.shape[1]
        if self.ids is None:
            if start != 0 or t != canvas_length or positions is not None:
                raise RuntimeError(
                    f"the KV cache is empty: the first forward must cover the whole canvas [0, {canvas_length}), "
                    f"got [{start}, {start + t})" + (" at per-row positions" if positions is not None else "")
                )
            self.ids = input_ids.clone()
            self.length = canvas_length
        elif canvas_length != self.length or input_ids.shape[0] != self.ids.shape[0]:
            raise RuntimeError(
                f"cache holds {self.ids.shape[0]} rows x {self.length} positions; "
                f"forward has {input_ids.shape[0]} x {canvas_length}"
            )
        elif positions is not None:
            if read_only:
                raise RuntimeError("a forward at per-row positions writes every query's K/V (read_only must be 0)")
            self.ids.scatter_(1, positions, input_ids)
        else:
            self.ids[:, start : start + t] = input_ids
        self._span = (start, start + t)
        self._read_only = read_only
        self._positions = positions

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        return block(h, ctx, kv_update=lambda k, v: self._merge(i, k, v))

    def _merge(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = self._span
        if i == len(self.keys):  # first (full) forward allocates
            self.keys.append(k.clone())
            self.values.append(v.clone())
        elif self._positions is not None:
            index = self._positions[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
            self.keys[i].scatter_(2, index, k)
            self.values[i].scatter_(2, index, v)
        else:
            skip = self._read_only
            self.keys[i][:, :, lo + skip : hi] = k[:, :, skip:]
            self.values[i][:, :, lo + skip : hi] = v[:, :, skip:]
        return self.keys[i], self.values[i]

    def graph_storage(self) -> list[list[torch.Tensor]]:
        """The per-layer tensors a forward writes in place (CUDA graphs keep them at fixed addresses:
        models/compiled.py); the lists themselves, so their entries can be replaced."""
        return [self.keys, self.values]

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop batch rows that finished (rows = indices to keep)."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        if self.ids is not None:
            self.ids = self.ids[rows]


class QueriesFirstKVCache(KVCache):
    """A :class:`KVCache` whose forwards at per-row positions attend the keys in dKV-Cache's order: the queries'
    (ascending), then the other positions' (ascending), as its published ``cat([fresh K/V, stored K/V])``. The
    attention is the same; SDPA sums over the keys in that order, so the logits carry the published bits."""

    _order: torch.Tensor | None = None

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int, read_only: int = 0,
              positions: torch.Tensor | None = None) -> None:
        super().begin(input_ids, start, canvas_length, read_only, positions)
        self._order = None
        if positions is not None:
            queried = torch.zeros(positions.shape[0], canvas_length, dtype=torch.bool, device=positions.device)
            queried.scatter_(1, positions, True)
            self._order = torch.sort((~queried).to(torch.int8), dim=1, stable=True).indices

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        order = self._order
        if order is None:
            return super().run_layer(i, block, h, ctx)
        if ctx.key_blocks is not None:
            raise RuntimeError("dKV-Cache's key order is for full attention; this model attends block-causally")
        if ctx.key_mask is not None:
            ctx = replace(ctx, key_mask=ctx.key_mask.gather(1, order))

        def merged_in_order(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            k_all, v_all = self._merge(i, k, v)
            index = order[:, None, :, None].expand(-1, k_all.shape[1], -1, k_all.shape[-1])
            return k_all.gather(2, index), v_all.gather(2, index)

        return block(h, ctx, kv_update=merged_in_order)
