"""dLLM-Cache storage (:class:`FeatureCache`): per layer K, V, attention output and FFN output, with the prompt
and the response refreshed on their own schedules and V-verify partial recomputation of the least similar tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..network import Block, LayerContext


def least_similar_rows(new: torch.Tensor, cached: torch.Tensor, n: int, compat: bool = False) -> torch.Tensor:
    """Positions [B, n] (ascending) of the n rows of ``new`` [B, R, F] least cosine-similar to ``cached``.

    The similarity a.b / sqrt(|a|^2 |b|^2) is taken in float64, so that an unchanged row is exactly 1, and rounded
    to float32, so that rows within rounding noise of each other tie; ties go to the lower position. The choice
    then does not hinge on the SIMD width of the reductions (ATEN_CPU_CAPABILITY; tests/test_cpu_capabilities.py).
    ``compat``: the published hook, ``F.cosine_similarity`` in the V dtype and ``torch.topk`` (which states no
    order for ties), its positions in ``torch.topk``'s order (least similar first), the order the hook gathers
    the rows in: the CPU attention kernel can round a query by its place among the queries.
    """
    if compat:
        return torch.topk(F.cosine_similarity(new, cached, dim=-1), n, dim=-1, largest=False).indices
    a, b = new.double(), cached.double()
    dot, a2, b2 = (a * b).sum(dim=-1), (a * a).sum(dim=-1), (b * b).sum(dim=-1)
    sim = (dot / (a2 * b2).sqrt().clamp_min(1e-16)).float()
    return torch.sort(sim, dim=-1, stable=True).indices[:, :n].sort(dim=-1).values


class FeatureCache:
    """dLLM-Cache storage: per layer K, V [B, Hkv, S, D], attention and FFN outputs [B, S, d].

    Positions ``[0, prompt_length)`` are the prompt, the rest the response. Before each forward the engine calls
    :meth:`plan` (and :meth:`select_rows` when a forward covers only some of the cohort's rows). A forward covers
    the canvas from position 0; a shorter one (SlowFast's truncated fast phase) reads and writes only the first
    ``length - prompt_length`` response slots, as the SlowFast copy of the published hook does.
    """

    shorter_canvas = True  # a forward covers the canvas from position 0, possibly fewer positions than stored

    def __init__(self, prompt_length: int, refresh_layer0: bool = True, verify_compat: bool = False) -> None:
        self.prompt_length = prompt_length
        self.refresh_layer0 = refresh_layer0  # upstream's later fix; False reproduces the older behaviour
        self.verify_compat = verify_compat  # V-verify ranks as the published hook (see least_similar_rows)
        self.refresh_prompt = True
        self.refresh_response = True
        self.verify_ratio = 0.0
        self.store: list[dict[str, torch.Tensor]] = []
        self.length = 0  # canvas length of the stored features (set by the first forward)
        self.rows: torch.Tensor | None = None  # stored rows the next forward covers (None = all)
        self.recomputed_tokens = 0  # token-layers recomputed by V-verify, for accounting

    def plan(self, refresh_prompt: bool, refresh_response: bool, verify_ratio: float = 0.0) -> None:
        """Say what the next forward recomputes; ``verify_ratio`` applies when the response is not refreshed."""
        if not 0.0 <= verify_ratio <= 1.0:
            raise ValueError(f"verify_ratio {verify_ratio} is outside [0, 1]")
        self.refresh_prompt, self.refresh_response, self.verify_ratio = refresh_prompt, refresh_response, verify_ratio

    def verified_count(self, response_length: int) -> int:
        """Response tokens V-verify recomputes per layer in the planned forward: int(R * rho), or 0."""
        return int(response_length * self.verify_ratio) if not self.refresh_response else 0

    def select_rows(self, rows: torch.Tensor | None) -> None:
        """Restrict the next forwards to these stored rows (indices into the cache's batch); None = all rows."""
        self.rows = rows

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        raise RuntimeError("dLLM-Cache forwards always start at canvas position 0")

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int, read_only: int = 0,
              positions: torch.Tensor | None = None) -> None:
        if start != 0 or read_only or positions is not None or input_ids.shape[1] != canvas_length:
            raise RuntimeError("dLLM-Cache forwards must cover the canvas from position 0")
        if not 0 < self.prompt_length < canvas_length:
            raise ValueError(f"prompt_length {self.prompt_length} must lie inside the canvas (0, {canvas_length})")
        if not self.store:
            if self.rows is not None:
                raise RuntimeError("the dLLM-Cache is empty: the first forward must cover every row")
            self.length = canvas_length
        elif canvas_length > self.length:
            raise RuntimeError(f"cache holds {self.length} positions; forward has {canvas_length}")

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        if i >= len(self.store):
            return self._allocate(block, h, ctx)
        c = self._working(i, h.shape[1])
        p = self.prompt_length
        full = (self.refresh_prompt and self.refresh_response) or (i == 0 and self.refresh_layer0)
        if full:
            self._recompute_span(c, block, h, ctx, 0, h.shape[1])
        elif self.refresh_response:
            self._recompute_span(c, block, h, ctx, p, h.shape[1])
        elif self.verify_ratio > 0:
            self._verify(c, block, h, ctx, with_prompt=self.refresh_prompt)
        elif self.refresh_prompt:
            self._recompute_span(c, block, h, ctx, 0, p)
        out = h + c["attn"] + c["ffn"]
        self._write_back(i, c, h.shape[1])
        return out

    def _allocate(self, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        q, k, v = block.qkv(h)
        attn = block.attend(q, k, v, ctx)
        ffn = block.ffn(h + attn)
        self.store.append({"k": k, "v": v, "attn": attn, "ffn": ffn})
        return h + attn + ffn

    def _working(self, i: int, length: int) -> dict[str, torch.Tensor]:
        """Layer i's features of the covered rows over canvas [0, length): views when every row is covered."""
        entry = self.store[i]
        rows = self.rows
        out = {}
        for name, t in entry.items():
            t = t if rows is None else t.index_select(0, rows)
            out[name] = t[:, :, :length] if name in ("k", "v") else t[:, :length]
        return out

    def _write_back(self, i: int, c: dict[str, torch.Tensor], length: int) -> None:
        if self.rows is None:
            return  # the working tensors are views of the store
        for name, t in self.store[i].items():
            if name in ("k", "v"):
                t[self.rows, :, :length] = c[name]
            else:
                t[self.rows, :length] = c[name]

    @staticmethod
    def _recompute_span(c: dict, block: Block, h: torch.Tensor, ctx: LayerContext, lo: int, hi: int) -> None:
        """Recompute q/k/v, attention and FFN of positions [lo, hi) against the other part's cached K/V."""
        hs = h[:, lo:hi]
        q, k, v = block.qkv(hs)
        c["k"][:, :, lo:hi] = k
        c["v"][:, :, lo:hi] = v
        index = None if (lo, hi) == (0, h.shape[1]) else torch.arange(lo, hi, device=h.device).expand(h.shape[0], -1)
        attn = block.attend(q, c["k"], c["v"], ctx, q_index=index)
        c["attn"][:, lo:hi] = attn
        c["ffn"][:, lo:hi] = block.ffn(hs + attn)

    def _verify(self, c: dict, block: Block, h: torch.Tensor, ctx: LayerContext, with_prompt: bool) -> None:
        """V-verify as the published hook: replace the whole response V with the fresh V, then recompute q, k,
        attention and FFN of the int(R * rho) response tokens whose fresh V is least similar to the cached V
        (together with the prompt on a prompt-refresh step)."""
        p = self.prompt_length
        hr = h[:, p:]
        b, r = hr.shape[:2]
        v_new = block.value(hr)  # [B, Hkv, R, D]
        n = self.verified_count(r)
        if n > 0:
            flat_new = v_new.transpose(1, 2).reshape(b, r, -1)
            flat_old = c["v"][:, :, p:].transpose(1, 2).reshape(b, r, -1)
            selected = least_similar_rows(flat_new, flat_old, n, compat=self.verify_compat) + p  # [B, n]
        else:
            selected = torch.zeros(b, 0, dtype=torch.long, device=h.device)
        c["v"][:, :, p:] = v_new
        if with_prompt:
            selected = torch.cat([torch.arange(p, device=h.device).expand(b, -1), selected], dim=1)
        if selected.shape[1] == 0:
            return
        h_sel = h.gather(1, selected[..., None].expand(-1, -1, h.shape[-1]))
        q, k, v = self._published_qkv(block, h, v_new, selected, with_prompt) if self.verify_compat else block.qkv(h_sel)
        kpos = selected[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
        c["k"].scatter_(2, kpos, k)
        c["v"].scatter_(2, kpos, v)
        attn = block.attend(q, c["k"], c["v"], ctx, q_index=selected)
        ffn = block.ffn(h_sel + attn)
        dpos = selected[..., None].expand(-1, -1, h.shape[-1])
        c["attn"].scatter_(1, dpos, attn)
        c["ffn"].scatter_(1, dpos, ffn)
        self.recomputed_tokens += b * n

    def _published_qkv(self, block: Block, h: torch.Tensor, v_new: torch.Tensor, selected: torch.Tensor,
                       with_prompt: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of the ``selected`` positions from the products the published hook takes: the prompt's (on a
        prompt refresh) from the prompt alone, the picked response rows' q and k from those rows alone (in the
        order they were picked), and their v the rows of the whole response's V product ``v_new`` (a small product
        may round differently from the same rows inside the large one, and the published row choice can rest on
        similarities one float32 step apart)."""
        p = self.prompt_length
        picked = selected[:, p:] if with_prompt else selected
        q, k, _ = block.qkv(h.gather(1, picked[..., None].expand(-1, -1, h.shape[-1])))
        v = v_new.gather(2, (picked - p)[:, None, :, None].expand(-1, v_new.shape[1], -1, v_new.shape[-1]))
        if with_prompt:
            qp, kp, vp = block.qkv(h[:, :p])
            q, k, v = torch.cat([qp, q], dim=2), torch.cat([kp, k], dim=2), torch.cat([vp, v], dim=2)
        return q, k, v

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop batch rows that finished (rows = indices to keep)."""
        self.store = [{k: t[rows] for k, t in entry.items()} for entry in self.store]
