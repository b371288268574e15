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


@dataclass
class ForwardResult:
    """Logits for rows ``rows`` over canvas positions [start, start + logits.shape[1]), or, with ``at``, at the
    candidates only; and the query positions the network computed for each row (its real prompt tokens, never
    left padding)."""

    rows: torch.Tensor  # [b] global row indices
    logits: torch.Tensor  # [b, e - s, V], or [n, V] at the pairs of ``at``
    start: int
    refresh: bool
    positions: torch.Tensor  # [b] long, on the CPU
    at: tuple[torch.Tensor, torch.Tensor] | None = None  # (index into rows [n], answer position [n]), batch order


def take_rows(value, rows: torch.Tensor, batch: int):
    """``value`` restricted to ``rows`` when it is a tensor whose first dimension is the batch."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
        return value.index_select(0, rows)
    return value


def _slice_kwargs(model_kwargs: dict, rows: torch.Tensor, batch: int) -> dict:
    return {k: take_rows(v, rows, batch) if isinstance(v, torch.Tensor) else v for k, v in model_kwargs.items()}


@dataclass
class _Cohort:
    rows: torch.Tensor
    cache: object
    block: tuple[int, int]
    since_refresh: int
    forwards: int = 0


class ForwardRunner:
    """Runs one step's forwards for the active rows under a cache mode; returns logits per row group."""

    def __init__(self, model: Callable, cache: Cache, prompt_length: int, attention_mask: torch.Tensor,
                 model_kwargs: dict | None, cfg_scale: float, mask_token_id: int):
        self.model = model
        self.cache = cache
        self.P = prompt_length
        self.mask = attention_mask
        self.batch = attention_mask.shape[0]
        self.model_kwargs = model_kwargs or {}
        self.cfg_scale = cfg_scale
        self.mask_token_id = mask_token_id
        self.cohorts: list[_Cohort] = []
        self.prompt_real = attention_mask[:, :prompt_length].sum(dim=1).long().cpu()  # real prompt ids per row
        # Dream's shifted logits: a span starting inside the canvas also computes the position before it
        self.shift = int(bool(getattr(getattr(model, "config", None), "shift_logits", False)))
        # our networks can run the LM head on the candidates only, or on their window (a large saving at a
        # 126k-152k vocabulary)
        self.head_at = bool(getattr(model, "accepts_logits_at", False))
        self.head_range = bool(getattr(model, "accepts_logits_range", False))
        self.window: tuple[int, int] | None = None
        self.candidates: torch.Tensor | None = None

    def _call(self, x: torch.Tensor, rows: torch.Tensor, cache=None, start: int = 0, end: int | None = None,
              window: tuple[int, int] | None = None, cut: bool = False
              ) -> tuple[torch.Tensor, int, tuple[torch.Tensor, torch.Tensor] | None]:
        """Logits of ``rows``, the canvas position of their first column, and the candidates they hold when the
        model computes the LM head at the candidates only (``self.candidates`` inside [start, end)); otherwise
        with ``window`` (canvas positions holding every candidate) a model that supports it computes the LM
        head only there. ``cut`` (or no cache) makes ``end`` the canvas length the network sees (SlowFast's
        truncated fast phase)."""
        kwargs = _slice_kwargs(self.model_kwargs, rows, self.batch)
        mask = self.mask.index_select(0, rows)
        end = x.shape[1] if end is None else end
        inp = x.index_select(0, rows)
        first, at = start, None
        if self.head_at and self.candidates is not None:
            sub = self.candidates.index_select(0, rows)
            sub[:, : max(start - self.P, 0)] = False
            sub[:, max(end - self.P, 0):] = False
            at = sub.nonzero(as_tuple=True)
            kwargs["logits_at"] = (at[0], at[1] + self.P)
        elif window is not None and self.head_range:
            lo, hi = max(window[0], start), min(window[1], end)
            if lo < hi:
                kwargs["logits_range"] = (lo, hi)
                first = lo
        if (cache is None or cut) and end < x.shape[1]:
            inp, mask = inp[:, :end], mask[:, :end]
        if cache is None:
            if self.cfg_scale > 0:
                return self._cfg_call(inp, mask, kwargs), first, at
            return self.model(inp, attention_mask=mask, **kwargs), first, at
        if start == 0 and (cut or end == x.shape[1]):
            return self.model(inp, attention_mask=mask, cache=cache, **kwargs), first, at
        return self.model(inp[:, start:end], attention_mask=mask, cache=cache, start=start, **kwargs), first, at

    def _cfg_call(self, inp: torch.Tensor, mask: torch.Tensor, kwargs: dict) -> torch.Tensor:
        """LLaDA classifier-free guidance: un + (cfg + 1)(cond - un), prompt masked in the unconditional copy."""
        un = inp.clone()
        prompt = torch.zeros_like(inp, dtype=torch.bool)
        prompt[:, : self.P] = mask[:, : self.P].bool()
        un[prompt] = self.mask_token_id
        both = {k: torch.cat([v, v]) if isinstance(v, torch.Tensor) and v.shape[:1] == inp.shape[:1] else v
                for k, v in kwargs.items()}
        if "logits_at" in kwargs:  # the same pairs in the unconditional copy, rows b .. 2b - 1
            at_rows, at_pos = kwargs["logits_at"]
            both["logits_at"] = (torch.cat([at_rows, at_rows + inp.shape[0]]), torch.cat([at_pos, at_pos]))
        logits = self.model(torch.cat([inp, un]), attention_mask=torch.cat([mask, mask]), **both)
        cond, uncond = logits.chunk(2)
        return uncond + (self.cfg_scale + 1) * (cond - uncond)

    def run(self, x: torch.Tensor, rows: torch.Tensor, block_lo: torch.Tensor, block_hi: torch.Tensor,
            canvas_limit: torch.Tensor | None, candidates: torch.Tensor | None = None) -> list[ForwardResult]:
        """Forwards for active ``rows``; block bounds and canvas limits are answer coordinates per row;
        ``candidates`` [B, G] (the positions whose logits the step reads) lets a model that supports it run the
        LM head there only."""
        self.window = (self.P + int(block_lo[rows].min()), self.P + int(block_hi[rows].max()))
        self.candidates = candidates
        if isinstance(self.cache, NoCache):
            out = []
            for group, lim in self._limit_groups(rows, canvas_limit, x.shape[1] - self.P):
                logits, first, at = self._call(x, group, end=self.P + lim, window=self.window)
                out.append(ForwardResult(group, logits, first, True, self._prompt(group) + lim, at))
            return out
        if isinstance(self.cache, DLLMCache):
            return self._run_dllm(x, rows, canvas_limit)
        return self._run_kv(x, rows, block_lo, block_hi)

    @staticmethod
    def _limit_groups(rows: torch.Tensor, canvas_limit: torch.Tensor | None, G: int) -> list[tuple[torch.Tensor, int]]:
        """Rows grouped by the answer length the network sees (all of G without a canvas limit)."""
        if canvas_limit is None:
            return [(rows, G)]
        limits = canvas_limit.index_select(0, rows)
        return [(rows[limits == lim], lim) for lim in torch.unique(limits).tolist()]

    def _prompt(self, rows: torch.Tensor) -> torch.Tensor:
        return self.prompt_real.index_select(0, rows.cpu())

    def _count(self, rows: torch.Tensor, n: int) -> torch.Tensor:
        return torch.full((rows.numel(),), n, dtype=torch.long)

    @staticmethod
    def _keep(cohort: _Cohort, keep: torch.Tensor) -> _Cohort | None:
        """Shrink a cohort (and its cache) to the rows in ``keep``; None when none is left."""
        if not keep.any():
            return None
        if not keep.all():
            index = keep.nonzero().squeeze(1)
            cohort.cache.keep_rows(index)
            cohort.rows = cohort.rows[index]
        return cohort

    def _run_dllm(self, x: torch.Tensor, rows: torch.Tensor, canvas_limit: torch.Tensor | None) -> list[ForwardResult]:
        from dllm_bench.models.cache import FeatureCache

        cfg: DLLMCache = self.cache
        if not self.cohorts:
            fc = FeatureCache(prompt_length=self.P, refresh_layer0=cfg.layer0_always, verify_compat=cfg.verify_compat)
            self.cohorts = [_Cohort(rows, fc, (0, 0), 0)]
        cohort = self.cohorts[0]
        active = torch.zeros(self.batch, dtype=torch.bool, device=rows.device)
        active[rows] = True
        kept = self._keep(cohort, active[cohort.rows])
        self.cohorts = [kept] if kept is not None else []
        cohort.forwards += 1
        refresh_prompt, refresh_response, ratio = cfg.plan(cohort.forwards)
        fc = cohort.cache
        fc.plan(refresh_prompt, refresh_response, ratio)
        out = []
        groups = self._limit_groups(cohort.rows, canvas_limit, x.shape[1] - self.P)
        for group, lim in groups:
            # rows cut at different lengths share the cache but run as separate forwards over their own rows
            fc.select_rows(None if len(groups) == 1 else torch.searchsorted(cohort.rows, group))
            logits, first, at = self._call(x, group, cache=fc, end=self.P + lim, window=self.window, cut=True)
            verified = fc.verified_count(lim)
            prompt = self._prompt(group) if refresh_prompt else self._count(group, 0)
            response = lim if refresh_response else verified
            out.append(ForwardResult(group, logits, first, refresh_prompt and refresh_response, prompt + response, at))
        fc.select_rows(None)
        return out

    def _run_kv(self, x: torch.Tensor, rows: torch.Tensor, block_lo: torch.Tensor,
                block_hi: torch.Tensor) -> list[ForwardResult]:
        from dllm_bench.models.cache import KVCache

        cfg: PrefixCache | DualCache = self.cache
        every = cfg.refresh_every
        T = x.shape[1]
        needs_refresh = torch.zeros(self.batch, dtype=torch.bool, device=rows.device)
        needs_refresh[rows] = True
        survivors = []
        results = []
        is_active = needs_refresh.clone()
        for cohort in self.cohorts:
            same_block = (block_lo[cohort.rows] == cohort.block[0]) & (block_hi[cohort.rows] == cohort.block[1])
            due = every is not None and cohort.since_refresh >= every
            keep = is_active[cohort.rows] & same_block & (not due)
            kept = self._keep(cohort, keep)
            if kept is None:
                continue
            needs_refresh[kept.rows] = False
            s = self.P + kept.block[0]
            e = T if isinstance(cfg, PrefixCache) else self.P + kept.block[1]
            logits, first, at = self._call(x, kept.rows, cache=kept.cache, start=s, end=e, window=self.window)
            kept.since_refresh += 1
            survivors.append(kept)
            results.append(ForwardResult(kept.rows, logits, first, False, self._count(kept.rows, e - s + self.shift), at))
        refresh_rows = needs_refresh.nonzero().squeeze(1)
        if refresh_rows.numel():
            keys = torch.stack([block_lo[refresh_rows], block_hi[refresh_rows]], dim=1)
            for key in torch.unique(keys, dim=0).tolist():
                group = refresh_rows[(keys[:, 0] == key[0]) & (keys[:, 1] == key[1])]
                kv = KVCache()
                logits, first, at = self._call(x, group, cache=kv, window=self.window)
                survivors.append(_Cohort(group, kv, (key[0], key[1]), 1))
                results.append(ForwardResult(group, logits, first, True, self._prompt(group) + (T - self.P), at))
        self.cohorts = survivors
        return results
