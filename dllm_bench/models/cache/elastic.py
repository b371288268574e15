"""Elastic-Cache storage (:class:`ElasticKVCache`): per layer the input residual stream, the (rotated) queries, keys
and values of every canvas position, and what the drift test needs: the attention rows of the tracked tokens and,
per layer, the most-attended token of the window's queries.

Three kinds of forward (the decoding cache, :mod:`dllm_bench.decoding.caches.elastic`, says which):

- full (the first forward): every layer, every position; fills the storage;
- reuse (``positions`` [B, Q]): every layer recomputes the queries only, against the stored keys and values of the
  rest, and measures per layer and row the drift ``sigma`` of the tracked tokens' attention rows;
- resume (:meth:`resume`, a forward over the whole canvas): layers below ``start`` are skipped; layer ``start`` takes
  its stored input (the queries' rows as the reuse forward just wrote them) and it and every deeper layer
  recompute all positions.
"""

from __future__ import annotations

import math

import torch

from ..network import Block, LayerContext, apply_rope


def attention_rows(q: torch.Tensor, k: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax attention probabilities [B, H, n, S] (at least float32) of rotated queries q [B, H, n, D] over rotated keys
    k [B, Hkv, S, D] (grouped heads repeated); ``key_mask`` [B, S] True = may be attended."""
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1) if rep > 1 else k
    dtype = torch.promote_types(q.dtype, torch.float32)
    scores = q.to(dtype) @ k.to(dtype).transpose(-1, -2) / math.sqrt(q.shape[-1])
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    return scores.softmax(dim=-1)


def row_cosine(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Per batch row [B]: the cosine similarity of attention rows a, b [B, H, n, S] over the keys, averaged over the
    heads and the n rows with ``weight`` [B, n] (1 for a tracked token, 0 for a repeat); 1 where a row tracks none."""
    cos = (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)).clamp_min(1e-12)  # [B, H, n]
    w = weight.to(cos.dtype)[:, None, :]
    total = (w.sum(dim=-1) * cos.shape[1]).sum(dim=-1)
    return torch.where(total > 0, (cos * w).sum(dim=(1, 2)) / total.clamp_min(1e-12), torch.ones_like(total))


def _gather_heads(t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """t [B, H, S, D] at positions pos [B, n] -> [B, H, n, D]."""
    return t.gather(2, pos[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[-1]))


class ElasticKVCache:
    """Per layer: input stream x [B, S, d], rotated q [B, H, S, D], rotated k and v [B, Hkv, S, D].

    Before each forward the session calls :meth:`plan` (the window's queries whose attention picks the most-attended
    token, the positions that cannot be picked, the tracked tokens) and, for a resume forward, :meth:`resume`.
    After a reuse forward ``sigma`` [L, B] holds each layer's drift; after any forward ``most_attended`` [L][B, k]
    each layer's most-attended tokens.
    """

    def __init__(self, n_layers: int, track_num: int) -> None:
        self.n_layers, self.track_num = n_layers, track_num
        self.x: list[torch.Tensor] = []
        self.q: list[torch.Tensor] = []
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.ids: torch.Tensor | None = None
        self.length = 0
        self.window = self.window_valid = self.excluded = self.tracked = self.tracked_valid = None
        self.sigma: torch.Tensor | None = None
        self.most_attended: list[torch.Tensor | None] = [None] * n_layers
        self._mode = "full"
        self._start = 0
        self._rows: torch.Tensor | None = None

    def plan(self, window: torch.Tensor, window_valid: torch.Tensor, excluded: torch.Tensor,
             tracked: torch.Tensor | None = None, tracked_valid: torch.Tensor | None = None) -> None:
        """The next forward's window queries [B, W] (``window_valid`` False on repeats), the positions [B, S] no
        layer may pick as most attended (masked, left padding), and the tracked tokens [B, n] (None: no drift test)."""
        self.window, self.window_valid, self.excluded = window, window_valid, excluded
        self.tracked, self.tracked_valid = tracked, tracked_valid
        self._start, self._rows = 0, None

    def resume(self, start: int, rows: torch.Tensor | None) -> None:
        """The next forward (over the whole canvas, for stored rows ``rows``; None = all) recomputes layers
        ``start`` .. L-1 at every position from layer ``start``'s stored input."""
        self._start, self._rows = start, rows

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        raise RuntimeError("Elastic-Cache forwards are the whole canvas or per-row positions, never a span")

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int, read_only: int = 0,
              positions: torch.Tensor | None = None) -> None:
        if start != 0 or read_only:
            raise RuntimeError("Elastic-Cache forwards are the whole canvas or per-row positions, never a span")
        if self.ids is None:
            if positions is not None or input_ids.shape[1] != canvas_length:
                raise RuntimeError("the Elastic-Cache is empty: the first forward must cover the whole canvas")
            self.ids, self.length, self._mode = input_ids.clone(), canvas_length, "full"
        elif positions is not None:
            self.ids.scatter_(1, positions, input_ids)
            self._mode = "reuse"
            self.sigma = torch.ones(self.n_layers, input_ids.shape[0], dtype=torch.float64, device=input_ids.device)
        else:
            if input_ids.shape[1] != self.length:
                raise RuntimeError(f"cache holds {self.length} positions; forward has {input_ids.shape[1]}")
            self._mode = "resume"

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        if self._mode == "reuse":
            return self._reuse(i, block, h, ctx)
        if self._mode == "resume" and i < self._start:
            return h  # skipped: layer ``start`` reads its stored input
        if self._mode == "resume" and i == self._start:
            h = self.x[i] if self._rows is None else self.x[i].index_select(0, self._rows)
        return self._full(i, block, h, ctx)

    def _full(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        """Layer i at every position of the forward's rows; stores its input and rotated q, k, v."""
        q, k, v = block.qkv(h)
        q = apply_rope(q, ctx.cos, ctx.sin)
        k = apply_rope(k, ctx.cos, ctx.sin)
        if i == len(self.x):  # the first forward allocates
            self.x.append(h.clone())
            self.q.append(q)
            self.k.append(k)
            self.v.append(v)
        else:
            for store, new in ((self.x, h), (self.q, q), (self.k, k), (self.v, v)):
                if self._rows is None:
                    store[i].copy_(new)
                else:
                    store[i].index_copy_(0, self._rows, new)
        attn = self._attend_rotated(block, q, k, v, ctx)
        self._pick(i, q, k, ctx)
        h = h + attn
        return h + block.ffn(h)

    def _reuse(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        """Layer i at the queries only: their input, q, k, v written in place; the tracked tokens' attention rows
        before and after the write give the layer's drift."""
        pos = ctx.index
        q, k, v = block.qkv(h)
        cos, sin = ctx.query_rope()
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        qs, ks, vs = self.q[i], self.k[i], self.v[i]
        past = None
        if self.tracked is not None:
            past = attention_rows(_gather_heads(qs, self.tracked), ks, ctx.key_mask)
        self.x[i].scatter_(1, pos[..., None].expand(-1, -1, h.shape[-1]), h)
        qs.scatter_(2, pos[:, None, :, None].expand(-1, q.shape[1], -1, q.shape[-1]), q)
        index = pos[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
        ks.scatter_(2, index, k)
        vs.scatter_(2, index, v)
        if past is not None:
            now = attention_rows(_gather_heads(qs, self.tracked), ks, ctx.key_mask)
            self.sigma[i] = row_cosine(past, now, self.tracked_valid)
        attn = self._attend_rotated(block, q, ks, vs, ctx)
        self._pick(i, qs, ks, ctx)
        h = h + attn
        return h + block.ffn(h)

    @staticmethod
    def _attend_rotated(block: Block, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        ctx: LayerContext) -> torch.Tensor:
        """The block's attention output for already rotated queries and keys."""
        mask = ctx.attention_mask()
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                               enable_gqa=block.n_kv_heads != block.n_heads)
        b, _, t, _ = out.shape
        return block.o_proj(out.transpose(1, 2).reshape(b, t, block.n_heads * block.head_dim))

    def _pick(self, i: int, q_all: torch.Tensor, k_all: torch.Tensor, ctx: LayerContext) -> None:
        """Layer i's most-attended tokens [B, k]: the largest attention received from the window's queries, summed
        over heads and queries, among the positions not excluded."""
        window, valid, excluded = self.window, self.window_valid, self.excluded
        if self._rows is not None:
            window, valid, excluded = (t.index_select(0, self._rows) for t in (window, valid, excluded))
        rows = attention_rows(_gather_heads(q_all, window), k_all, ctx.key_mask)  # [B, H, W, S]
        received = (rows * valid[:, None, :, None].to(rows.dtype)).sum(dim=(1, 2))
        received = received.masked_fill(excluded, -1.0)
        top = torch.topk(received, k=self.track_num, dim=-1).indices
        if self._rows is None:
            self.most_attended[i] = top
        else:
            self.most_attended[i] = self.most_attended[i].index_copy(0, self._rows, top)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop batch rows that finished (rows = indices to keep)."""
        for store in (self.x, self.q, self.k, self.v):
            store[:] = [t[rows] for t in store]
        self.most_attended = [None if t is None else t[rows] for t in self.most_attended]
        if self.ids is not None:
            self.ids = self.ids[rows]
