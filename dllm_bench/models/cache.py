"""Cache storage that plugs into :meth:`DiffusionLM.forward` through ``run_layer``.

These objects only store and merge tensors; *when* to refresh is the decoding engine's decision
(:mod:`dllm_bench.decoding`). Both run the network's own :class:`~dllm_bench.models.network.Block` pieces, so
a cached forward is the uncached computation restricted to fewer positions.

- :class:`KVCache` (Fast-dLLM prefix and dual cache): per layer, K (after RoPE: each key is rotated once, when
  it is written, where the published code rotates every stored key every step; same values) and V of every
  canvas position. A forward over a span writes the span's K/V in place and attends over the whole stored
  canvas.
- :class:`FeatureCache` (dLLM-Cache): per layer K, V, attention output and FFN output, with the prompt and the
  response refreshed on their own schedules and V-verify partial recomputation of the least similar tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .network import Block, LayerContext


class KVCache:
    """Per-layer K/V of the whole canvas; a forward over ``[start, start + T)`` overwrites that span."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.ids: torch.Tensor | None = None  # the canvas tokens the stored K/V were computed from
        self.length = 0
        self._span = (0, 0)

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        """Stored canvas tokens [B, hi - lo] (Dream needs position start-1 for a span's first logits)."""
        if self.ids is None:
            raise RuntimeError("the KV cache is empty: run a full forward first")
        return self.ids[:, lo:hi]

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int) -> None:
        t = input_ids.shape[1]
        if self.ids is None:
            if start != 0 or t != canvas_length:
                raise RuntimeError(
                    f"the KV cache is empty: the first forward must cover the whole canvas [0, {canvas_length}), "
                    f"got [{start}, {start + t})"
                )
            self.ids = input_ids.clone()
            self.length = canvas_length
        elif canvas_length != self.length or input_ids.shape[0] != self.ids.shape[0]:
            raise RuntimeError(
                f"cache holds {self.ids.shape[0]} rows x {self.length} positions; "
                f"forward has {input_ids.shape[0]} x {canvas_length}"
            )
        else:
            self.ids[:, start : start + t] = input_ids
        self._span = (start, start + t)

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        return block(h, ctx, kv_update=lambda k, v: self._merge(i, k, v))

    def _merge(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = self._span
        if i == len(self.keys):  # first (full) forward allocates
            self.keys.append(k.clone())
            self.values.append(v.clone())
        else:
            self.keys[i][:, :, lo:hi] = k
            self.values[i][:, :, lo:hi] = v
        return self.keys[i], self.values[i]

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop batch rows that finished (rows = indices to keep)."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        if self.ids is not None:
            self.ids = self.ids[rows]


class FeatureCache:
    """dLLM-Cache storage: per layer K, V [B, Hkv, S, D], attention and FFN outputs [B, S, d].

    Positions ``[0, prompt_length)`` are the prompt, the rest the response. Before each forward the engine calls
    :meth:`plan`; the forward always covers the whole canvas.
    """

    def __init__(self, prompt_length: int, refresh_layer0: bool = True) -> None:
        self.prompt_length = prompt_length
        self.refresh_layer0 = refresh_layer0  # upstream's later fix; False reproduces the older behaviour
        self.refresh_prompt = True
        self.refresh_response = True
        self.verify_ratio = 0.0
        self.store: list[dict[str, torch.Tensor]] = []
        self.length = 0
        self.recomputed_tokens = 0  # token-layers recomputed by V-verify, for accounting

    def plan(self, refresh_prompt: bool, refresh_response: bool, verify_ratio: float = 0.0) -> None:
        """Say what the next forward recomputes; ``verify_ratio`` applies when the response is not refreshed."""
        if not 0.0 <= verify_ratio <= 1.0:
            raise ValueError(f"verify_ratio {verify_ratio} is outside [0, 1]")
        self.refresh_prompt, self.refresh_response, self.verify_ratio = refresh_prompt, refresh_response, verify_ratio

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        raise RuntimeError("dLLM-Cache forwards always cover the whole canvas")

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int) -> None:
        if start != 0 or input_ids.shape[1] != canvas_length:
            raise RuntimeError("dLLM-Cache forwards must cover the whole canvas")
        if not 0 < self.prompt_length < canvas_length:
            raise ValueError(f"prompt_length {self.prompt_length} must lie inside the canvas (0, {canvas_length})")
        self.length = canvas_length

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        full = (
            i >= len(self.store)
            or (self.refresh_prompt and self.refresh_response)
            or (i == 0 and self.refresh_layer0)
        )
        if full:
            return self._full(i, block, h, ctx)
        c, p = self.store[i], self.prompt_length
        if self.refresh_prompt:
            self._recompute_span(c, block, h, ctx, 0, p)
        elif self.refresh_response:
            self._recompute_span(c, block, h, ctx, p, h.shape[1])
        elif self.verify_ratio > 0:
            self._verify(c, block, h, ctx)
        return h + c["attn"] + c["ffn"]

    def _full(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        q, k, v = block.qkv(h)
        attn = block.attend(q, k, v, ctx)
        ffn = block.ffn(h + attn)
        entry = {"k": k, "v": v, "attn": attn, "ffn": ffn}
        if i == len(self.store):
            self.store.append(entry)
        else:
            self.store[i] = entry
        return h + attn + ffn

    @staticmethod
    def _recompute_span(c: dict, block: Block, h: torch.Tensor, ctx: LayerContext, lo: int, hi: int) -> None:
        """Recompute q/k/v, attention and FFN of positions [lo, hi) against the other part's cached K/V."""
        hs = h[:, lo:hi]
        q, k, v = block.qkv(hs)
        c["k"][:, :, lo:hi] = k
        c["v"][:, :, lo:hi] = v
        index = torch.arange(lo, hi, device=h.device).expand(h.shape[0], -1)
        attn = block.attend(q, c["k"], c["v"], ctx, q_index=index)
        c["attn"][:, lo:hi] = attn
        c["ffn"][:, lo:hi] = block.ffn(hs + attn)

    def _verify(self, c: dict, block: Block, h: torch.Tensor, ctx: LayerContext) -> None:
        """V-verify: recompute the response tokens whose fresh V is least similar to the cached V."""
        p = self.prompt_length
        hr = h[:, p:]
        n = int(hr.shape[1] * self.verify_ratio)
        v_new = block.value(hr)  # [B, Hkv, R, D]
        if n > 0:
            b = hr.shape[0]
            flat_new = v_new.transpose(1, 2).reshape(b, hr.shape[1], -1)
            flat_old = c["v"][:, :, p:].transpose(1, 2).reshape(b, hr.shape[1], -1)
            sim = F.cosine_similarity(flat_new.float(), flat_old.float(), dim=-1)  # [B, R]
            idx = torch.topk(sim, n, dim=-1, largest=False).indices.sort(dim=-1).values  # [B, n]
            pos = idx + p
            h_sel = hr.gather(1, idx[..., None].expand(-1, -1, hr.shape[-1]))
            q, k, _ = block.qkv(h_sel)
            kpos = pos[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
            c["k"].scatter_(2, kpos, k)
            c["v"].scatter_(2, kpos, v_new.gather(2, kpos - p))
            attn = block.attend(q, c["k"], c["v"], ctx, q_index=pos)
            ffn = block.ffn(h_sel + attn)
            dpos = pos[..., None].expand(-1, -1, h.shape[-1])
            c["attn"].scatter_(1, dpos, attn)
            c["ffn"].scatter_(1, dpos, ffn)
            self.recomputed_tokens += b * n
        c["v"][:, :, p:] = v_new  # upstream replaces the whole response V after the partial recompute

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop batch rows that finished (rows = indices to keep)."""
        self.store = [{k: t[rows] for k, t in entry.items()} for entry in self.store]
