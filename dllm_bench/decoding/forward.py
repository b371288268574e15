"""How a step runs the network for each cache mode, for any subset of rows.

Rows that share a cache must share what the network computes, so rows are kept in cohorts: a cohort is a
set of rows with one cache object, created by a refresh (full forward) and shrunk when rows leave it (a row
that finished, or one that needs its own refresh). Each cohort costs one forward per step; rows that move in
lockstep (fixed-step schedules, the usual case) stay in one cohort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dllm_bench.decoding.config import Cache, DLLMCache, DualCache, NoCache, PrefixCache
from dllm_bench.decoding.suffix_dropout import PrunedCanvas, SuffixSampler


@dataclass
class ForwardResult:
    """Logits for rows ``rows`` over canvas positions [start, start + logits.shape[1]), or, with ``at``, at the
    candidates only; and the query positions the network computed for each row (its real prompt tokens, never
    left padding)."""

    rows: torch.Tensor  # [b] global row indices
    logits: torch.Tensor  # [b, e - s, V], or [n, V] at the pairs of ``at``
    start: int
    refresh: bool
    positions: torch.Tensor  # [b] long, on the rows' device
    at: tuple[torch.Tensor, torch.Tensor] | None = None  # (index into rows [n], answer position [n]), batch order


def take_rows(value, rows: torch.Tensor, batch: int):
    """``value`` restricted to ``rows`` when it is a tensor whose first dimension is the batch."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
        return value.index_select(0, rows)
    return value


def _slice_kwargs(model_kwargs: dict, rows: torch.Tensor, batch: int) -> dict:
    return {k: take_rows(v, rows, batch) if isinstance(v, torch.Tensor) else v for k, v in model_kwargs.items()}


@dataclass
class HostView:
    """What the host knows of a step before it runs, from one read at the end of the previous step: the active
    rows and every row's block bounds and canvas limit (answer coordinates)."""

    rows: list[int]
    block_lo: list[int]
    block_hi: list[int]
    limit: list[int] | None = None


@dataclass
class _Cohort:
    rows: torch.Tensor
    host_rows: list[int]
    cache: object
    block: tuple[int, int]
    since_refresh: int
    forwards: int = 0
    canvas: PrunedCanvas | None = None  # the cohort's pruned canvas under suffix dropout


class ForwardRunner:
    """Runs one step's forwards for the active rows under a cache mode; returns logits per row group.

    Every decision about rows and cohorts is taken on the host from the step's :class:`HostView`, so a step
    reads nothing more from the device than the candidates' count (to size the LM head).
    """

    def __init__(self, model: Callable, cache: Cache, prompt_length: int, attention_mask: torch.Tensor,
                 model_kwargs: dict | None, cfg_scale: float, mask_token_id: int, padded: bool = True,
                 dropout: SuffixSampler | None = None):
        self.model = model
        self.cache = cache
        self.P = prompt_length
        self.batch = attention_mask.shape[0]
        # without padding the network gets no mask (every key is attended): SDPA may then dispatch to Flash
        self.mask = attention_mask if padded else None
        self.model_kwargs = model_kwargs or {}
        self.cfg_scale = cfg_scale
        self.mask_token_id = mask_token_id
        self.cohorts: list[_Cohort] = []
        self.prompt_real = attention_mask[:, :prompt_length].sum(dim=1).long()  # real prompt ids per row
        # Dream's shifted logits: a span starting inside the canvas also computes the position before it
        self.shift = int(bool(getattr(getattr(model, "config", None), "shift_logits", False)))
        # our networks can run the LM head on the candidates only, or on their window (a large saving at a
        # 126k-152k vocabulary)
        self.head_at = bool(getattr(model, "accepts_logits_at", False))
        self.head_range = bool(getattr(model, "accepts_logits_range", False))
        self.window: tuple[int, int] | None = None
        self.candidates: torch.Tensor | None = None
        self._rows: tuple[list[int], torch.Tensor] = ([], torch.empty(0, dtype=torch.long))
        # suffix dropout (DPad): the network sees a pruned canvas at the full canvas's position ids
        self.dropout = dropout
        self.position_ids = None
        if dropout is not None:
            T = attention_mask.shape[1]
            self.position_ids = ((attention_mask.long().cumsum(-1) - 1).clamp(min=0) if padded else
                                 torch.arange(T, device=attention_mask.device).expand(self.batch, T))

    def _device_rows(self, host_rows: list[int]) -> torch.Tensor:
        """Row indices on the device: the step's active rows as given, any other group copied from the host."""
        if host_rows == self._rows[0]:
            return self._rows[1]
        return torch.tensor(host_rows, dtype=torch.long, device=self._rows[1].device)

    def _call(self, x: torch.Tensor, rows: torch.Tensor, cache=None, start: int = 0, end: int | None = None,
              window: tuple[int, int] | None = None, cut: bool = False, canvas: PrunedCanvas | None = None
              ) -> tuple[torch.Tensor, int, tuple[torch.Tensor, torch.Tensor] | None]:
        """Logits of ``rows``, the canvas position of their first column, and the candidates they hold when the
        model computes the LM head at the candidates only (``self.candidates`` inside [start, end)); otherwise
        with ``window`` (canvas positions holding every candidate) a model that supports it computes the LM
        head only there. ``cut`` (or no cache) makes ``end`` the canvas length the network sees (SlowFast's
        truncated fast phase). ``canvas`` (suffix dropout) replaces the rows' canvas by its pruned columns."""
        kwargs = _slice_kwargs(self.model_kwargs, rows, self.batch)
        mask = None if self.mask is None else self.mask.index_select(0, rows)
        inp = x.index_select(0, rows)
        if canvas is not None:
            inp, mask = inp.gather(1, canvas.index), canvas.mask
            kwargs["position_ids"] = canvas.position_ids
        length = inp.shape[1]
        end = length if end is None else end
        first, at = start, None
        if self.head_at and self.candidates is not None:
            sub = self.candidates.index_select(0, rows)
            sub[:, : max(start - self.P, 0)] = False
            sub[:, max(end - self.P, 0):] = False
            at = sub.nonzero(as_tuple=True)  # the step's one read: how many rows the LM head runs on
            kwargs["logits_at"] = (at[0], at[1] + self.P)
        elif window is not None and self.head_range:
            lo, hi = max(window[0], start), min(window[1], end)
            if lo < hi:
                kwargs["logits_range"] = (lo, hi)
                first = lo
        if (cache is None or cut) and end < length:
            inp = inp[:, :end]
            mask = None if mask is None else mask[:, :end]
        if cache is None:
            if self.cfg_scale > 0:
                return self._cfg_call(inp, mask, kwargs), first, at
            return self.model(inp, attention_mask=mask, **kwargs), first, at
        if start == 0 and (cut or end == length):
            return self.model(inp, attention_mask=mask, cache=cache, **kwargs), first, at
        return self.model(inp[:, start:end], attention_mask=mask, cache=cache, start=start, **kwargs), first, at

    def _cfg_call(self, inp: torch.Tensor, mask: torch.Tensor | None, kwargs: dict) -> torch.Tensor:
        """LLaDA classifier-free guidance: un + (cfg + 1)(cond - un), prompt masked in the unconditional copy."""
        un = inp.clone()
        prompt = torch.zeros_like(inp, dtype=torch.bool)
        prompt[:, : self.P] = True if mask is None else mask[:, : self.P].bool()
        un = torch.where(prompt, self.mask_token_id, un)
        both = {k: torch.cat([v, v]) if isinstance(v, torch.Tensor) and v.shape[:1] == inp.shape[:1] else v
                for k, v in kwargs.items()}
        if "logits_at" in kwargs:  # the same pairs in the unconditional copy, rows b .. 2b - 1
            at_rows, at_pos = kwargs["logits_at"]
            both["logits_at"] = (torch.cat([at_rows, at_rows + inp.shape[0]]), torch.cat([at_pos, at_pos]))
        logits = self.model(torch.cat([inp, un]), attention_mask=None if mask is None else torch.cat([mask, mask]),
                            **both)
        cond, uncond = logits.chunk(2)
        return uncond + (self.cfg_scale + 1) * (cond - uncond)

    def run(self, x: torch.Tensor, rows: torch.Tensor, block_lo: torch.Tensor, block_hi: torch.Tensor,
            canvas_limit: torch.Tensor | None, candidates: torch.Tensor | None = None,
            view: HostView | None = None) -> list[ForwardResult]:
        """Forwards for active ``rows``; block bounds and canvas limits are answer coordinates per row;
        ``candidates`` [B, G] (the positions whose logits the step reads) lets a model that supports it run the
        LM head there only; ``view`` is the host's copy of the rows, bounds and limits (read here when absent)."""
        if view is None:
            view = _read_view(rows, block_lo, block_hi, canvas_limit)
        self._rows = (view.rows, rows)
        self.window = None
        if not self.head_at and self.head_range:
            self.window = (self.P + min(view.block_lo[r] for r in view.rows),
                           self.P + max(view.block_hi[r] for r in view.rows))
        self.candidates = candidates
        if self.dropout is not None:
            self.dropout.update(view.rows, view.block_hi)
        if isinstance(self.cache, NoCache):
            out = []
            for group, lim in self._limit_groups(view.rows, view.limit, x.shape[1] - self.P):
                rows_g = self._device_rows(group)
                if self.dropout is not None:
                    canvas = self._canvas(group, rows_g)
                    logits, first, at = self._call(x, rows_g, window=self.window, canvas=canvas)
                    out.append(ForwardResult(rows_g, logits, first, True, self._live(rows_g, canvas, 0), at))
                    continue
                logits, first, at = self._call(x, rows_g, end=self.P + lim, window=self.window)
                out.append(ForwardResult(rows_g, logits, first, True, self._prompt(rows_g) + lim, at))
            return out
        if isinstance(self.cache, DLLMCache):
            return self._run_dllm(x, view)
        return self._run_kv(x, view)

    @staticmethod
    def _limit_groups(rows: list[int], limits: list[int] | None, G: int) -> list[tuple[list[int], int]]:
        """Rows grouped by the answer length the network sees (all of G without a canvas limit)."""
        if limits is None:
            return [(rows, G)]
        return [([r for r in rows if limits[r] == lim], lim) for lim in sorted({limits[r] for r in rows})]

    def _canvas(self, group: list[int], rows: torch.Tensor) -> PrunedCanvas:
        """The pruned canvas of ``group`` under suffix dropout."""
        mask = None if self.mask is None else self.mask.index_select(0, rows)
        return self.dropout.canvas(group, self.P, self.position_ids.index_select(0, rows), mask)

    def _live(self, rows: torch.Tensor, canvas: PrunedCanvas, start: int) -> torch.Tensor:
        """Query positions per row of a forward over the pruned canvas from ``start`` (real prompt tokens only)."""
        live = torch.tensor(canvas.lengths, dtype=torch.long, device=rows.device) - max(start, self.P)
        return live + (self._prompt(rows) if start == 0 else 0)

    def _prompt(self, rows: torch.Tensor) -> torch.Tensor:
        return self.prompt_real.index_select(0, rows)

    def _count(self, rows: torch.Tensor, n: int) -> torch.Tensor:
        return torch.full((rows.numel(),), n, dtype=torch.long, device=rows.device)

    def _keep(self, cohort: _Cohort, keep: list[bool]) -> _Cohort | None:
        """Shrink a cohort (and its cache) to the rows where ``keep`` holds; None when none is left."""
        if not any(keep):
            return None
        if not all(keep):
            index = [i for i, k in enumerate(keep) if k]
            cohort.cache.keep_rows(torch.tensor(index, dtype=torch.long, device=cohort.rows.device))
            if cohort.canvas is not None:
                cohort.canvas = cohort.canvas.keep_rows(index)
            cohort.host_rows = [cohort.host_rows[i] for i in index]
            cohort.rows = self._device_rows(cohort.host_rows)
        return cohort

    def _run_dllm(self, x: torch.Tensor, view: HostView) -> list[ForwardResult]:
        from dllm_bench.models.cache import FeatureCache

        cfg: DLLMCache = self.cache
        if not self.cohorts:
            fc = FeatureCache(prompt_length=self.P, refresh_layer0=cfg.layer0_always, verify_compat=cfg.verify_compat)
            self.cohorts = [_Cohort(self._device_rows(view.rows), list(view.rows), fc, (0, 0), 0)]
        cohort = self.cohorts[0]
        active = set(view.rows)
        kept = self._keep(cohort, [r in active for r in cohort.host_rows])
        self.cohorts = [kept] if kept is not None else []
        cohort.forwards += 1
        refresh_prompt, refresh_response, ratio = cfg.plan(cohort.forwards)
        fc = cohort.cache
        fc.plan(refresh_prompt, refresh_response, ratio)
        out = []
        groups = self._limit_groups(cohort.host_rows, view.limit, x.shape[1] - self.P)
        for group, lim in groups:
            rows_g = cohort.rows if len(groups) == 1 else self._device_rows(group)
            # rows cut at different lengths share the cache but run as separate forwards over their own rows
            fc.select_rows(None if len(groups) == 1 else torch.searchsorted(cohort.rows, rows_g))
            logits, first, at = self._call(x, rows_g, cache=fc, end=self.P + lim, window=self.window, cut=True)
            verified = fc.verified_count(lim)
            prompt = self._prompt(rows_g) if refresh_prompt else self._count(rows_g, 0)
            response = lim if refresh_response else verified
            out.append(ForwardResult(rows_g, logits, first, refresh_prompt and refresh_response, prompt + response, at))
        fc.select_rows(None)
        return out

    def _run_kv(self, x: torch.Tensor, view: HostView) -> list[ForwardResult]:
        from dllm_bench.models.cache import KVCache

        cfg: PrefixCache | DualCache = self.cache
        every = cfg.refresh_every
        T = x.shape[1]
        active = set(view.rows)
        survivors, results, covered = [], [], set()
        for cohort in self.cohorts:
            due = every is not None and cohort.since_refresh >= every
            keep = [r in active and (view.block_lo[r], view.block_hi[r]) == cohort.block and not due
                    for r in cohort.host_rows]
            kept = self._keep(cohort, keep)
            if kept is None:
                continue
            covered.update(kept.host_rows)
            s = self.P + kept.block[0]
            canvas = kept.canvas
            e = (T if canvas is None else canvas.length) if isinstance(cfg, PrefixCache) else self.P + kept.block[1]
            logits, first, at = self._call(x, kept.rows, cache=kept.cache, start=s, end=e, window=self.window,
                                           canvas=canvas)
            kept.since_refresh += 1
            survivors.append(kept)
            count = (self._live(kept.rows, canvas, s) if canvas is not None and isinstance(cfg, PrefixCache)
                     else self._count(kept.rows, e - s))
            results.append(ForwardResult(kept.rows, logits, first, False, count + self.shift, at))
        refresh = [r for r in view.rows if r not in covered]
        for key in sorted({(view.block_lo[r], view.block_hi[r]) for r in refresh}):
            group = [r for r in refresh if (view.block_lo[r], view.block_hi[r]) == key]
            rows_g = self._device_rows(group)
            kv = KVCache()
            canvas = self._canvas(group, rows_g) if self.dropout is not None else None
            logits, first, at = self._call(x, rows_g, cache=kv, window=self.window, canvas=canvas)
            survivors.append(_Cohort(rows_g, group, kv, key, 1, canvas=canvas))
            count = self._prompt(rows_g) + (T - self.P) if canvas is None else self._live(rows_g, canvas, 0)
            results.append(ForwardResult(rows_g, logits, first, True, count, at))
        self.cohorts = survivors
        return results


def _read_view(rows: torch.Tensor, block_lo: torch.Tensor, block_hi: torch.Tensor,
               canvas_limit: torch.Tensor | None) -> HostView:
    """The host view of a step for a caller that gives none (one read)."""
    parts = [block_lo, block_hi] + ([canvas_limit] if canvas_limit is not None else [])
    values = torch.stack([p.to(torch.long) for p in parts]).tolist()
    return HostView(rows.tolist(), values[0], values[1], values[2] if canvas_limit is not None else None)
