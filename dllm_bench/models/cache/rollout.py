"""d2Cache storage (:class:`RolloutKVCache`): K/V of every canvas position, a forward's queries being any per-row
set of positions, with attention rollout over the layers.

A forward writes its queries' K/V (K after RoPE) in place and attends over the whole stored canvas. Attention is
computed explicitly (softmax in float32 of q.k / sqrt(d)) because the rollout needs its weights: per layer, the
head-mean attention rows of the queries (identity rows for the positions not queried) plus the identity,
row-normalised, multiply the rollout so far (:func:`rollout_step`). ``importance`` [B, T] is the rollout's column
sums after the last forward: how much every position feeds the others through all layers; ``first_output`` the
first (full) forward's output residual stream, from which d2Cache takes its confidences. A forward may cover only
some of the stored rows (:meth:`RolloutKVCache.select_rows`: d2Cache's published batch loop leaves out the rows that
wait at a block end); the others keep their K/V and importance.
"""

from __future__ import annotations

import math

import torch

from ..network import Block, LayerContext, apply_rope


def rollout_step(rollout: torch.Tensor | None, attention: torch.Tensor, queries: torch.Tensor | None) -> torch.Tensor:
    """One layer of attention rollout: ``attention`` [B, Q, T] (head-mean rows of the queries at canvas positions
    ``queries`` [B, Q], or all T positions when None) in an identity [B, T, T]; plus the identity, rows normalised to
    sum 1; times ``rollout`` (the identity when None)."""
    B, _, T = attention.shape
    eye = torch.eye(T, dtype=attention.dtype, device=attention.device)
    if queries is None:
        rows = attention
    else:
        rows = eye.repeat(B, 1, 1)
        rows.scatter_(1, queries[..., None].expand(-1, -1, T), attention)
    mixed = rows + eye
    mixed = mixed / mixed.sum(dim=-1, keepdim=True)
    return mixed if rollout is None else mixed @ rollout


class RolloutKVCache:
    """Per-layer K (after RoPE) and V [B, Hkv, T, D] of the whole canvas and the last forward's attention rollout."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.ids: torch.Tensor | None = None
        self.length = 0
        self.rollout: torch.Tensor | None = None  # [b, T, T] of the last forward (its rows)
        self.first_output: torch.Tensor | None = None  # [B, T, d]: the first (full) forward's last residual stream
        self.rows: torch.Tensor | None = None  # stored rows the next forward covers (None = all)
        self._positions: torch.Tensor | None = None
        self._covered: torch.Tensor | None = None  # the rows the last forward covered (None = all)
        self._before: torch.Tensor | None = None  # [B, T] importance before the last forward (rows it left out)
        self._importance: torch.Tensor | None = None  # [B, T] once read after a forward

    def select_rows(self, rows: torch.Tensor | None) -> None:
        """Restrict the next forwards to these stored rows (ascending indices into the storage's batch); None = all."""
        self.rows = rows

    @property
    def importance(self) -> torch.Tensor:
        """[B, T]: each row's last forward's rollout summed over its rows (what each position contributes)."""
        if self._importance is None:
            if self.rollout is None:
                raise RuntimeError("the rollout cache has run no forward yet")
            last = self.rollout.sum(dim=1)
            self._importance = last if self._covered is None else self._before.index_copy(0, self._covered, last)
        return self._importance

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        if self.ids is None:
            raise RuntimeError("the rollout cache is empty: run a full forward first")
        return self.ids[:, lo:hi]

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int, read_only: int = 0,
              positions: torch.Tensor | None = None) -> None:
        t = input_ids.shape[1]
        if read_only:
            raise RuntimeError("the rollout cache writes every query's K/V (read_only must be 0)")
        if self.ids is None:
            if start != 0 or t != canvas_length or positions is not None:
                raise RuntimeError(f"the rollout cache is empty: the first forward must cover the whole canvas "
                                   f"[0, {canvas_length})")
            self.ids = input_ids.clone()
            self.length = canvas_length
        elif positions is None:
            raise RuntimeError("after its first forward the rollout cache runs at per-row query positions")
        else:
            rows = self.ids.shape[0] if self.rows is None else self.rows.numel()
            if canvas_length != self.length or input_ids.shape[0] != rows:
                raise RuntimeError(f"cache covers {rows} rows x {self.length} positions; forward has "
                                   f"{input_ids.shape[0]} x {canvas_length}")
            if self.rows is None:
                self.ids.scatter_(1, positions, input_ids)
            else:
                self.ids[self.rows] = self.ids[self.rows].scatter(1, positions, input_ids)
        self._before = None if self.rows is None else self.importance
        self._covered = self.rows
        self._positions = positions
        self.rollout = self._importance = None

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        q, k, v = block.qkv(h)
        cos, sin = ctx.query_rope()
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if i == len(self.keys):
            self.keys.append(k.clone())
            self.values.append(v.clone())
            keys, values = self.keys[i], self.values[i]
        else:
            index = self._positions[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
            if self._covered is None:
                keys, values = self.keys[i].scatter_(2, index, k), self.values[i].scatter_(2, index, v)
            else:
                keys = self.keys[i][self._covered].scatter_(2, index, k)
                values = self.values[i][self._covered].scatter_(2, index, v)
                self.keys[i][self._covered], self.values[i][self._covered] = keys, values
        attn, weights = self._attend(block, q, keys, values, ctx.key_mask)
        self.rollout = rollout_step(self.rollout, weights.mean(dim=1), self._positions)
        h = h + attn
        h = h + block.ffn(h)
        if self._positions is None:
            self.first_output = h
        return h

    @staticmethod
    def _attend(block: Block, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention output after o_proj [B, Q, d] and its weights [B, H, Q, T] (softmax taken in float32)."""
        if k.shape[1] != q.shape[1]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights, v)
        b, _, t, _ = out.shape
        return block.o_proj(out.transpose(1, 2).reshape(b, t, -1)), weights

    def keep_rows(self, rows: torch.Tensor) -> None:
        if self.rollout is not None or self._importance is not None:
            self._importance = self.importance[rows]
        self.rollout, self._covered, self._before = None, None, None
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        if self.ids is not None:
            self.ids = self.ids[rows]
        if self.first_output is not None:
            self.first_output = self.first_output[rows]
