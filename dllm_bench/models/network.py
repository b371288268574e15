"""The bidirectional transformer behind LLaDA and Dream, in one readable file.

Both flavours are the same network: RMSNorm, rotary attention without a causal mask, SwiGLU MLP and an untied
LM head. LLaDA has no biases; Dream (Qwen2) has q/k/v biases, grouped-query attention, and predicts token i
from hidden state i-1, which :meth:`DiffusionLM.forward` undoes so that every caller sees "logits at position i
predict token i".

Caching is an argument, not a second copy of the model: ``forward(..., cache=obj)`` hands each layer to
``obj.run_layer``, which runs the same :class:`Block` pieces (``qkv``, ``attend``, ``ffn``) on whichever
positions it decides to recompute (see :mod:`dllm_bench.models.cache`); ``query_positions`` [B, Q] makes the
queries per-row canvas positions instead of one span.

Beside the math: checkpoint tensor names live in :mod:`.tensor_names`, and :class:`Linear` (``nn.Linear`` with a
faster CPU product, the same values) in :mod:`.cpu_linear`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .blocks import block_causal_mask, block_ids
from .config import ModelConfig
from .cpu_linear import Linear
from .host import host_reads_free
from .tensor_names import speak_dense_names
from .tied import tie_head


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, cast back, then scaled (as LLaDA and Qwen2 do)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                 dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [B, 1, S, head_dim] for integer positions [B, S], computed in float32, then cast to ``dtype``
    (the rotation's precision, see :func:`apply_rope`)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.float()[..., None] * inv_freq  # [B, S, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate [B, H, T, D] by cos/sin [B, 1, T, D] in the tables' dtype, then cast back to x's: float32 tables
    give LLaDA's ``rope_full_precision``, tables in the model dtype round every product and the sum there (as
    Dream's model file and LLaDA without full precision do). Tables narrower than x rotate its first dims only and
    pass the rest (partial RoPE, LLaDA2's ``partial_rotary_factor``)."""
    d = cos.shape[-1]
    if d < x.shape[-1]:
        return torch.cat([apply_rope(x[..., :d], cos, sin), x[..., d:]], dim=-1)
    xr = x.to(cos.dtype)
    return (xr * cos + rotate_half(xr) * sin).to(x.dtype)


@dataclass
class LayerContext:
    """What every layer of one forward shares: rotary tables over the whole canvas, the key mask, the query span.

    ``cos``/``sin`` are [B, 1, S, D] for all S canvas positions (keys always cover the canvas); the forward's
    queries are the positions ``[start, start + length)``, or ``index`` [B, length] (per-row canvas positions)
    when the forward was given them; a cache may pick others for a piece with its own index.
    """

    cos: torch.Tensor
    sin: torch.Tensor
    key_mask: torch.Tensor | None  # [B, S] bool, True = may be attended
    start: int
    length: int
    index: torch.Tensor | None = None  # [B, length] long: the queries' canvas positions (None = the span)
    pair_mask: torch.Tensor | None = None  # [B, S, S] bool, query i may attend key j (no cache: queries = canvas)
    key_blocks: torch.Tensor | None = None  # [B, S] long: block of every canvas position (block-causal attention)

    def attention_mask(self, q_index: torch.Tensor | None = None) -> torch.Tensor | None:
        """The SDPA mask: [B, 1, T, S] with block-causal attention (the queries: ``q_index`` [B, T], else the
        forward's), else [B, 1, S, S] from ``pair_mask`` (and the key mask), else [B, 1, 1, S], or None."""
        if self.key_blocks is not None:
            return self._block_mask(q_index)
        if self.pair_mask is None:
            return None if self.key_mask is None else self.key_mask[:, None, None, :]
        mask = self.pair_mask if self.key_mask is None else self.pair_mask & self.key_mask[:, None, :]
        return mask[:, None]

    def _block_mask(self, q_index: torch.Tensor | None) -> torch.Tensor:
        index = self.index if q_index is None else q_index
        if index is None:
            q_blocks = self.key_blocks[:, self.start : self.start + self.length]
        else:
            q_blocks = self.key_blocks.gather(1, index)
        mask = block_causal_mask(q_blocks, self.key_blocks)
        if self.pair_mask is not None:
            mask = mask & self.pair_mask
        if self.key_mask is not None:
            mask = mask & self.key_mask[:, None, :]
        return mask[:, None]

    def query_rope(self, index: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for the query positions: the forward's queries, or the positions ``index`` [B, n]."""
        if index is None:
            index = self.index
        if index is None:
            sl = slice(self.start, self.start + self.length)
            return self.cos[:, :, sl], self.sin[:, :, sl]
        gather = index[:, None, :, None].expand(-1, 1, -1, self.cos.shape[-1])
        return self.cos.gather(2, gather), self.sin.gather(2, gather)


class Block(nn.Module):
    """One transformer layer, exposed as pieces (qkv, attend, ffn) so caches can run them on chosen positions."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, hd = cfg.d_model, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, hd
        self.attn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.q_proj = Linear(d, cfg.n_heads * hd, bias=cfg.qkv_bias)
        self.k_proj = Linear(d, cfg.n_kv_heads * hd, bias=cfg.qkv_bias)
        self.v_proj = Linear(d, cfg.n_kv_heads * hd, bias=cfg.qkv_bias)
        self.o_proj = Linear(cfg.n_heads * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.gate_proj = Linear(d, cfg.mlp_hidden_size, bias=False)
        self.up_proj = Linear(d, cfg.mlp_hidden_size, bias=False)
        self.down_proj = Linear(cfg.mlp_hidden_size, d, bias=False)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.head_dim).transpose(1, 2)  # [B, n, T, D]

    def qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Normed projections of residual stream h [B, T, d]: q [B, H, T, D], k and v [B, Hkv, T, D] (no RoPE)."""
        x = self.attn_norm(h)
        return (
            self._heads(self.q_proj(x), self.n_heads),
            self._heads(self.k_proj(x), self.n_kv_heads),
            self._heads(self.v_proj(x), self.n_kv_heads),
        )

    def value(self, h: torch.Tensor) -> torch.Tensor:
        """v [B, Hkv, T, D] alone (dLLM-Cache's V-verify needs only this)."""
        return self._heads(self.v_proj(self.attn_norm(h)), self.n_kv_heads)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: LayerContext, q_index: torch.Tensor | None = None,
        keys_rotated: bool = False,
    ) -> torch.Tensor:
        """Attention output (after o_proj) [B, T, d] of queries q over all canvas keys k, v [B, Hkv, S, D];
        ``keys_rotated``: k already carries RoPE (a KV cache rotates each key once, when it is written)."""
        q_cos, q_sin = ctx.query_rope(q_index)
        q = apply_rope(q, q_cos, q_sin)
        if not keys_rotated:
            k = apply_rope(k, ctx.cos, ctx.sin)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=ctx.attention_mask(q_index),
                                             enable_gqa=self.n_kv_heads != self.n_heads)
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        """SwiGLU MLP output [B, T, d] (LLaDA: ff_proj is the SiLU gate, up_proj the linear branch)."""
        x = self.ffn_norm(h)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def forward(self, h: torch.Tensor, ctx: LayerContext, kv_update: Any = None) -> torch.Tensor:
        """Plain layer; ``kv_update(k, v) -> (k_all, v_all)`` lets a KV cache merge the span into stored keys.

        With a KV cache the span's keys are rotated before they are stored (RoPE is elementwise per position,
        so the values are the same), and a cached step rotates its T keys instead of all S."""
        q, k, v = self.qkv(h)
        if kv_update is None:
            return self._finish(h, self.attend(q, k, v, ctx))
        k, v = kv_update(apply_rope(k, *ctx.query_rope()), v)
        return self._finish(h, self.attend(q, k, v, ctx, keys_rotated=True))

    def _finish(self, h: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        h = h + attn
        return h + self.ffn(h)


class DiffusionLM(nn.Module):
    """LLaDA / Dream masked-diffusion language model; ``state_dict()`` uses the checkpoint's own tensor names."""

    accepts_logits_range = True  # forward(..., logits_range=(a, b)): LM head on canvas positions [a, b) only
    accepts_logits_at = True  # forward(..., logits_at=(rows, positions)): LM head at those pairs only, [n, V]
    # the LM head runs on at least this many rows (padded with copies): on the CPU's BLAS (MKL) a row's logits
    # from 12 rows up are the bits of the whole canvas's product (tests/models/test_linear.py); other BLAS
    # libraries (cuBLAS) pick kernels by shape, so there they agree to rounding only
    head_min_rows = 16
    # what runs the layers: None = run_layers (eager); compile_network puts the compiled stack here (a class
    # default, so the MoE and LLaDA2 networks, which skip this __init__, have it too)
    layer_stack: Any = None

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.rms_norm_eps)
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False)
        self.tokenizer: Any = None  # set by load_model
        self._rope_memo: tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool] | None = None
        speak_dense_names(self)
        if config.tie_embeddings:
            tie_head(self)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: Any = None,
        start: int = 0,
        embed_override: tuple[torch.Tensor, torch.Tensor] | None = None,
        logits_range: tuple[int, int] | None = None,
        logits_at: tuple[torch.Tensor, torch.Tensor] | None = None,
        query_positions: torch.Tensor | None = None,
        query_key_mask: torch.Tensor | None = None,
        block_anchor: torch.Tensor | int | None = None,
        raw_logits: bool = False,
        block_size: int | None = None,
    ) -> torch.Tensor:
        """Logits [B, T, V] for ``input_ids`` [B, T] placed at canvas positions ``[start, start + T)``.

        attention_mask / position_ids / embed_override cover the whole canvas [B, S] (S = T without a cache).
        A partial span (start > 0 or T < S) needs a filled KV cache holding the other positions.
        ``logits_range=(a, b)`` (absolute positions inside the span) computes the LM head only there;
        ``logits_at=(rows, positions)`` ([n] each, absolute positions inside the span) only at those pairs, and
        the logits are [n, V] in that order. ``query_key_mask`` [B, S, S] bool (without a cache) says which keys
        each query attends, on top of ``attention_mask`` (WINO's shadow block).
        ``query_positions`` [B, T] (ascending per row, a filled cache holding the rest): ``input_ids`` are the
        tokens at those canvas positions, one set per row, instead of a span (see :meth:`_forward_at`).
        ``block_anchor`` ([B] or int, position-id units): where generated blocks start under an anchored block grid
        (the prompt's length; see :mod:`.blocks`); block-causal attention comes from the config, the block size
        too unless ``block_size`` gives it (an anchored grid whose blocks are the decoder's, D2F).
        ``raw_logits``: a shifted model's logits at i from its own state i (its prediction of token i + 1, as its
        model file returns them), not shifted back; no position before the span is run.
        """
        if logits_range is not None and logits_at is not None:
            raise ValueError("give logits_range or logits_at, not both")
        if query_key_mask is not None and (cache is not None or query_key_mask.shape[1:] != (t := input_ids.shape[1], t)):
            raise ValueError(f"query_key_mask needs no cache and shape [B, T, T], got {tuple(query_key_mask.shape)}")
        if query_positions is not None:
            if raw_logits:
                raise ValueError("raw_logits is a span forward's option, not query_positions'")
            return self._forward_at(input_ids, query_positions, attention_mask, position_ids, cache, embed_override,
                                    logits_range, logits_at, block_anchor, block_size)
        b, t = input_ids.shape
        s = self._canvas_length(t, start, attention_mask, cache)
        if start < 0 or start + t > s:
            raise ValueError(f"span [{start}, {start + t}) is outside the canvas of length {s}")
        # Dream's logits at i come from hidden state i-1: for a span starting at start > 0 also run start-1.
        shift = self.config.shift_logits and not raw_logits
        q_lo = start - 1 if (shift and start > 0) else start
        if q_lo < start:
            input_ids = torch.cat([cache.token_ids(q_lo, start), input_ids], dim=1)
        if attention_mask is not None:
            attention_mask = attention_mask.to(device=input_ids.device).bool()
            if position_ids is None:
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        arange = position_ids is None  # 0 .. s-1 in every row: the memo knows these without reading them
        if arange:
            position_ids = torch.arange(s, device=input_ids.device).expand(b, s)
        cos, sin = self._rope_tables(position_ids, arange)
        ctx = LayerContext(cos=cos, sin=sin, key_mask=attention_mask, start=q_lo, length=start + t - q_lo,
                           pair_mask=None if query_key_mask is None else query_key_mask.to(input_ids.device).bool(),
                           key_blocks=self._key_blocks(position_ids, block_anchor, block_size))

        h = self.embed(input_ids)
        if embed_override is not None:
            where, embeds = embed_override
            sl = slice(q_lo, start + t)
            h = torch.where(where[:, sl, None].to(h.device), embeds[:, sl].to(h), h)
        if cache is not None:
            cache.begin(input_ids, q_lo, s, read_only=start - q_lo)
        h = (self.layer_stack or self.run_layers)(h, ctx, cache)

        return self._logits(h, q_lo, start, start + t, attention_mask, logits_range, logits_at, shift)

    def run_layers(self, h: torch.Tensor, ctx: LayerContext, cache: Any = None) -> torch.Tensor:
        """The residual stream [B, T, d] after every layer (through ``cache.run_layer`` when given): the part of a
        forward whose shapes are fixed per block, which :func:`.compiled.compile_network` compiles."""
        for i, block in enumerate(self.layers):
            h = block(h, ctx) if cache is None else cache.run_layer(i, block, h, ctx)
        return h

    def _logits(self, h: torch.Tensor, q_lo: int, lo: int, hi: int, attention_mask: torch.Tensor | None,
                logits_range: tuple[int, int] | None, logits_at: tuple[torch.Tensor, torch.Tensor] | None,
                shift: bool = True) -> torch.Tensor:
        """The LM head where the caller asked, by one path: (row, position) pairs -> the hidden states that
        predict them (Dream's shift) -> :meth:`head`. [n, V] for ``logits_at``, else [B, b - a, V] over
        ``logits_range`` = (a, b) (default the span [lo, hi)); ``h`` holds the states of positions q_lo .. hi - 1."""
        if logits_at is not None:
            rows, pos = (v.to(h.device) for v in logits_at)
            if rows.shape != pos.shape or rows.dim() != 1:
                raise ValueError(f"logits_at needs two [n] index tensors, got shapes {tuple(rows.shape)} and "
                                 f"{tuple(pos.shape)}")
            if rows.numel() and host_reads_free(pos.device) and (int(pos.min()) < lo or int(pos.max()) >= hi):
                raise ValueError(f"logits_at positions {int(pos.min())}..{int(pos.max())} are not inside the span "
                                 f"[{lo}, {hi})")  # checked where the read is free: a sync elsewhere
        else:
            a, b = (lo, hi) if logits_range is None else logits_range
            if not lo <= a < b <= hi:
                raise ValueError(f"logits_range {logits_range} is not inside the span [{lo}, {hi})")
            rows = torch.arange(h.shape[0], device=h.device).repeat_interleave(b - a)
            pos = torch.arange(a, b, device=h.device).repeat(h.shape[0])
        src = self._sources(rows, pos, attention_mask) if self.config.shift_logits and shift else pos
        logits = self.head(h[rows, src - q_lo])
        return logits if logits_at is not None else logits.view(h.shape[0], b - a, logits.shape[-1])

    def head(self, states: torch.Tensor) -> torch.Tensor:
        """Final norm and LM head: logits [n, V] of hidden states [n, d], run on at least ``head_min_rows`` rows
        (fewer are padded with copies of the last) so that a row's logits do not depend on how few were asked."""
        n = states.shape[0]
        if 0 < n < self.head_min_rows:
            states = states[torch.arange(self.head_min_rows, device=states.device).clamp(max=n - 1)]
        return self.lm_head(self.norm(states))[:n]

    def _forward_at(self, input_ids: torch.Tensor, query: torch.Tensor, attention_mask: torch.Tensor | None,
                    position_ids: torch.Tensor | None, cache: Any, embed_override, logits_range, logits_at,
                    block_anchor: torch.Tensor | int | None = None, block_size: int | None = None) -> torch.Tensor:
        """A forward whose queries are per-row canvas positions ``query`` [B, Q] (ascending in each row).

        Keys and values of the other positions come from ``cache``. Logits: at ``logits_at`` pairs ([n, V]; each
        position a query), else [B, Q, V] at the queries. Dream's logits at i come from the hidden state at i-1
        (or i itself, as :meth:`_sources` says), which must then be a query as well."""
        if cache is None or not getattr(cache, "length", 0):
            raise ValueError("query_positions need a filled cache holding the other positions' keys and values")
        if logits_range is not None:
            raise ValueError("logits_range is a span's option; with query_positions give logits_at")
        b, t = input_ids.shape
        if tuple(query.shape) != (b, t):
            raise ValueError(f"query_positions {tuple(query.shape)} must match input_ids {(b, t)}")
        query = query.to(device=input_ids.device, dtype=torch.long)
        s = attention_mask.shape[1] if attention_mask is not None else cache.length
        if attention_mask is not None:
            attention_mask = attention_mask.to(device=input_ids.device).bool()
            if position_ids is None:
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        arange = position_ids is None
        if arange:
            position_ids = torch.arange(s, device=input_ids.device).expand(b, s)
        cos, sin = self._rope_tables(position_ids, arange)
        ctx = LayerContext(cos=cos, sin=sin, key_mask=attention_mask, start=0, length=t, index=query,
                           key_blocks=self._key_blocks(position_ids, block_anchor, block_size))
        h = self.embed(input_ids)
        if embed_override is not None:
            where, embeds = embed_override
            pick = where.to(h.device).gather(1, query)
            rows_embeds = embeds.to(h).gather(1, query[..., None].expand(-1, -1, embeds.shape[-1]))
            h = torch.where(pick[..., None], rows_embeds, h)
        cache.begin(input_ids, 0, s, positions=query)
        h = (self.layer_stack or self.run_layers)(h, ctx, cache)
        if logits_at is None and not self.config.shift_logits:
            return self.head(h.reshape(b * t, -1)).view(b, t, -1)
        if logits_at is not None:
            rows, pos = (v.to(h.device) for v in logits_at)
            if rows.shape != pos.shape or rows.dim() != 1:
                raise ValueError(f"logits_at needs two [n] index tensors, got shapes {tuple(rows.shape)} and "
                                 f"{tuple(pos.shape)}")
        else:
            rows = torch.arange(b, device=h.device).repeat_interleave(t)
            pos = query.reshape(-1)
        src = self._sources(rows, pos, attention_mask) if self.config.shift_logits else pos
        query_rows = query.index_select(0, rows)
        column = torch.searchsorted(query_rows, src[:, None]).squeeze(1).clamp(max=t - 1)
        if rows.numel() and host_reads_free(h.device) and not bool((query_rows.gather(1, column[:, None]).squeeze(1)
                                                                    == src).all()):  # a sync elsewhere
            raise ValueError("a logit's source position is not among the row's query_positions")
        out = self.head(h[rows, column])
        return out if logits_at is not None else out.view(b, t, -1)

    def _key_blocks(self, position_ids: torch.Tensor, block_anchor: torch.Tensor | int | None,
                    block_size: int | None = None) -> torch.Tensor | None:
        """Block ids [B, S] of the canvas under block-causal attention (None: full attention)."""
        cfg = self.config
        if cfg.attention == "full":
            if block_anchor is not None or block_size is not None:
                raise ValueError("block_anchor and block_size are for block-causal attention; this model attends fully")
            return None
        size = cfg.block_size if block_size is None else block_size
        if size <= 0:
            raise ValueError(f"{cfg.name_or_path or 'this model'} has no block size of its own (an anchored grid of the "
                             "decoder's blocks): give block_size to the forward")
        return block_ids(position_ids, size, cfg.block_grid, block_anchor)

    def _rope_tables(self, position_ids: torch.Tensor, arange: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for ``position_ids`` in the rotation's dtype (float32 with ``rope_full_precision``, else the
        model's), reused while the positions repeat (every step of one decode).

        ``arange``: the ids are 0 .. S-1 in every row, so the memo matches on shape alone; other ids are compared
        only where that host read is free (the CPU), and computed afresh elsewhere."""
        memo = self._rope_memo
        dtype = torch.float32 if self.config.rope_full_precision else self.dtype
        if (memo is not None and memo[0].shape == position_ids.shape and memo[0].device == position_ids.device
                and memo[1].dtype == dtype):
            if arange and memo[3]:
                return memo[1], memo[2]
            if not arange and not memo[3] and host_reads_free(position_ids.device) and torch.equal(memo[0], position_ids):
                return memo[1], memo[2]
        cos, sin = rope_cos_sin(position_ids, self.config.rotary_dim, self.config.rope_theta, dtype)
        self._rope_memo = (position_ids if arange else position_ids.clone(), cos, sin, arange)
        return cos, sin

    @staticmethod
    def _sources(rows: torch.Tensor, pos: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Dream's source positions [n] for the logits at (rows, pos): i - 1, or i itself where i - 1 is before
        the canvas or padding (Dream reuses position 0's own state; we extend that to a row's first real token
        so that left padding cannot change a row)."""
        prev = pos - 1
        valid = prev >= 0
        if attention_mask is not None:
            valid &= attention_mask[rows, prev.clamp(min=0)]
        return torch.where(valid, prev, pos)

    @staticmethod
    def _canvas_length(t: int, start: int, attention_mask: torch.Tensor | None, cache: Any) -> int:
        if attention_mask is not None:
            return attention_mask.shape[1]
        if cache is not None and getattr(cache, "length", 0):
            # a dLLM-Cache forward covers the canvas from 0, and may be shorter than the stored one (SlowFast's cut)
            return start + t if getattr(cache, "shorter_canvas", False) else cache.length
        return start + t

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

