"""How a step runs the network for any subset of rows: the cache's session plans the step's forwards (which
rows, under which storage, which query positions, what each counts; :mod:`dllm_bench.decoding.caches`), the runner
runs them and turns each into logits at the step's candidates.

Rows that share a cache storage must share what the network computes, so a cache keeps rows in cohorts: a cohort is
a set of rows with one storage, created by a refresh (full forward) and shrunk when rows leave it (a row that
finished, or one that needs its own refresh). Each cohort costs one forward per step; rows that move in lockstep
(fixed-step schedules, the usual case) stay in one cohort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dllm_bench.decoding.caches import Cache, Canvas, Forward, HostView, StepRows
from dllm_bench.decoding.suffix_dropout import PrunedCanvas, SuffixSampler

__all__ = ["ForwardResult", "ForwardRunner", "HostView", "take_rows"]


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


def anchored_grid_kwargs(model: Callable, prompt_real: torch.Tensor, block_length: int | None) -> dict:
    """What every forward of a block-causal model on an anchored grid needs: where each row's blocks start (its real
    prompt's end) and, where the model leaves it to the decoder (D2F), the block size: the decode's block length."""
    config = getattr(model, "config", None)
    if getattr(config, "attention", "full") != "block_causal" or getattr(config, "block_grid", None) != "anchored":
        return {}
    kwargs: dict = {"block_anchor": prompt_real}
    if getattr(config, "block_size", 0) <= 0:
        if block_length is None:
            raise ValueError("this model's anchored blocks are the decoder's: the decode needs a block length")
        kwargs["block_size"] = block_length
    return kwargs


def take_rows(value, rows: torch.Tensor, batch: int):
    """``value`` restricted to ``rows`` when it is a tensor whose first dimension is the batch."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
        return value.index_select(0, rows)
    return value


def _slice_kwargs(model_kwargs: dict, rows: torch.Tensor, batch: int) -> dict:
    return {k: take_rows(v, rows, batch) if isinstance(v, torch.Tensor) else v for k, v in model_kwargs.items()}


class ForwardRunner:
    """Runs one step's forwards for the active rows as the cache's session plans them; returns logits per forward.

    Every decision about rows and cohorts is taken on the host from the step's :class:`HostView`, so a step
    reads nothing more from the device than the candidates' count (to size the LM head).
    """

    def __init__(self, model: Callable, cache: Cache, prompt_length: int, attention_mask: torch.Tensor,
                 model_kwargs: dict | None, cfg_scale: float, mask_token_id: int, padded: bool = True,
                 dropout: SuffixSampler | None = None, block_length: int | None = None):
        self.model = model
        self.cache = cache
        self.P = prompt_length
        self.batch = attention_mask.shape[0]
        # without padding the network gets no mask (every key is attended): SDPA may then dispatch to Flash
        self.mask = attention_mask if padded else None
        self.model_kwargs = model_kwargs or {}
        self.cfg_scale = cfg_scale
        self.mask_token_id = mask_token_id
        self.prompt_real = attention_mask[:, :prompt_length].sum(dim=1).long()  # real prompt ids per row
        self.model_kwargs = {**self.model_kwargs, **anchored_grid_kwargs(model, self.prompt_real, block_length)}
        # Dream's shifted logits: a span starting inside the canvas also computes the position before it
        self.shift = int(bool(getattr(getattr(model, "config", None), "shift_logits", False)))
        # our networks can run the LM head on the candidates only, or on their window (a large saving at a
        # 126k-152k vocabulary)
        self.head_at = bool(getattr(model, "accepts_logits_at", False))
        self.head_range = bool(getattr(model, "accepts_logits_range", False))
        self.window: tuple[int, int] | None = None
        # the step's input embeddings in place of the tokens' own (``Policy.soft_inputs``): (where [B, T] bool,
        # embeddings [B, T, d]) over the whole canvas, or None
        self.embed_override: tuple[torch.Tensor, torch.Tensor] | None = None
        self.candidates: torch.Tensor | None = None
        self.session = cache.session(Canvas(prompt_length, attention_mask.shape[1], self.prompt_real, self.shift,
                                             mask_token_id, model))
        # suffix dropout (DPad): every forward sees a pruned canvas at the full canvas's position ids
        self.dropout = dropout
        self.position_ids = None
        self.host_rows: dict[int, tuple[torch.Tensor, list[int]]] = {}  # id(device rows) -> (them, host rows)
        self.canvases: dict[int, tuple[object, PrunedCanvas, list[int]]] = {}  # id(storage) -> its canvas
        if dropout is not None:
            T = attention_mask.shape[1]
            self.position_ids = ((attention_mask.long().cumsum(-1) - 1).clamp(min=0) if padded else
                                 torch.arange(T, device=attention_mask.device).expand(self.batch, T))

    def _kwargs(self, rows: torch.Tensor) -> dict:
        """The forward's model keyword arguments for ``rows``, with the step's input embeddings where it has some."""
        kwargs = _slice_kwargs(self.model_kwargs, rows, self.batch)
        if self.embed_override is not None:
            kwargs["embed_override"] = tuple(v.index_select(0, rows) for v in self.embed_override)
        return kwargs

    def _call(self, x: torch.Tensor, rows: torch.Tensor, cache=None, start: int = 0, end: int | None = None,
              window: tuple[int, int] | None = None, cut: bool = False, canvas: PrunedCanvas | None = None
              ) -> tuple[torch.Tensor, int, tuple[torch.Tensor, torch.Tensor] | None]:
        """Logits of ``rows``, the canvas position of their first column, and the candidates they hold when the
        model computes the LM head at the candidates only (``self.candidates`` inside [start, end)); otherwise
        with ``window`` (canvas positions holding every candidate) a model that supports it computes the LM
        head only there. ``cut`` (or no cache) makes ``end`` the canvas length the network sees (SlowFast's
        truncated fast phase). ``canvas`` (suffix dropout) replaces the rows' canvas by its pruned columns."""
        kwargs = self._kwargs(rows)
        mask = None if self.mask is None else self.mask.index_select(0, rows)
        inp = x.index_select(0, rows)
        if canvas is not None:
            inp, mask = inp.gather(1, canvas.index), canvas.mask
            kwargs["position_ids"] = canvas.position_ids
        length = inp.shape[1]
        end = length if end is None else min(end, length)
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

    def _call_at(self, x: torch.Tensor, rows: torch.Tensor, storage, positions: torch.Tensor,
                 unqueried_zero: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Logits at the candidates of ``rows`` from a forward whose queries are ``positions`` [b, Q] (canvas
        positions per row, holding every candidate, or with ``unqueried_zero`` zero logits at the candidates they
        leave out); the LM head runs at the candidates only."""
        if not self.head_at:
            raise RuntimeError(f"cache {self.cache.name!r} queries per-row positions: the model must take logits_at "
                               "(our networks do)")
        kwargs = self._kwargs(rows)
        mask = None if self.mask is None else self.mask.index_select(0, rows)
        inp = x.index_select(0, rows).gather(1, positions)
        sub = self.candidates.index_select(0, rows)
        at = sub.nonzero(as_tuple=True)  # the step's one read: how many rows the LM head runs on
        if unqueried_zero:
            return self._call_at_queried(inp, mask, kwargs, storage, positions, sub, at), at
        kwargs["logits_at"] = (at[0], at[1] + self.P)
        logits = self.model(inp, attention_mask=mask, cache=storage, query_positions=positions, **kwargs)
        return logits, at

    def _call_at_queried(self, inp, mask, kwargs, storage, positions, sub, at) -> torch.Tensor:
        """Logits [n, V] at the candidate pairs ``at``: the network's at the queried ones, zeros elsewhere."""
        G = sub.shape[1]
        # a candidate's logits come from its own position, or (Dream) from the one before
        queried = sub.new_zeros(sub.shape[0], self.P + G).scatter_(1, positions, True)[:, self.P - self.shift:]
        queried = queried[:, :G]
        hit = (sub & queried).nonzero(as_tuple=True)  # a second read: the queried candidates
        kwargs["logits_at"] = (hit[0], hit[1] + self.P)
        part = self.model(inp, attention_mask=mask, cache=storage, query_positions=positions, **kwargs)
        where = torch.searchsorted(at[0] * G + at[1], hit[0] * G + hit[1])
        out = part.new_zeros(at[0].numel(), part.shape[-1])
        return out.index_copy_(0, where, part)

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

    def run(self, x: torch.Tensor, rows: torch.Tensor, candidates: torch.Tensor | None, view: HostView
            ) -> list[ForwardResult]:
        """Forwards for the active ``rows`` of canvas ``x`` [B, T]; ``candidates`` [B, G] (the positions whose logits
        the step reads) lets a model that supports it run the LM head there only; ``view`` is the host's copy of
        the rows, block bounds (answer coordinates), canvas limits and masked counts."""
        self.window = None
        if not self.head_at and self.head_range:
            self.window = (self.P + min(view.block_lo[r] for r in view.rows),
                           self.P + max(view.block_hi[r] for r in view.rows))
        self.candidates = candidates
        step_rows = StepRows(view.rows, rows)
        if self.dropout is not None:
            self.dropout.update(view.rows, view.block_hi)
            step_rows = _RecordedRows(view.rows, rows, self.host_rows)
        return [self._run_forward(x, f) for f in self.session.forwards(view, step_rows, x)]

    def _pruned(self, f: Forward) -> PrunedCanvas:
        """The pruned canvas of a planned forward: built for its rows at a full forward, else the one its storage
        was filled with (restricted to the rows it still holds)."""
        group = self.host_rows[id(f.rows)][1]
        full = f.start == 0 and f.end is None
        if f.storage is None or full or id(f.storage) not in self.canvases:
            mask = None if self.mask is None else self.mask.index_select(0, f.rows)
            canvas = self.dropout.canvas(group, self.P, self.position_ids.index_select(0, f.rows), mask)
        else:
            _, canvas, held = self.canvases[id(f.storage)]
            if held != group:
                canvas = canvas.keep_rows([held.index(r) for r in group])
        if f.storage is not None:
            self.canvases[id(f.storage)] = (f.storage, canvas, group)
        return canvas

    def _run_forward(self, x: torch.Tensor, f: Forward) -> ForwardResult:
        """Run one planned forward; its forward positions per row as the plan counts them."""
        canvas = None
        if f.positions is not None:
            logits, at = self._call_at(x, f.rows, f.storage, f.positions, f.unqueried_zero)
            first = 0
        else:
            canvas = self._pruned(f) if self.dropout is not None else None
            logits, first, at = self._call(x, f.rows, cache=f.storage, start=f.start, end=f.end, window=self.window,
                                           cut=f.cut, canvas=canvas)
        if canvas is not None:  # the live columns of the pruned canvas this forward queried
            lengths = torch.tensor(canvas.lengths, dtype=torch.long, device=f.rows.device)
            end = lengths if f.end is None else lengths.clamp(max=f.end)
            counted = (self.prompt_real.index_select(0, f.rows) + end - self.P if f.count_prompt
                       else end - f.start + (self.shift if f.start > 0 else 0))
        elif f.count_prompt:
            counted = self.prompt_real.index_select(0, f.rows) + f.count
        elif isinstance(f.count, torch.Tensor):
            counted = f.count.to(dtype=torch.long, device=f.rows.device)
        else:
            counted = torch.full((f.rows.numel(),), f.count, dtype=torch.long, device=f.rows.device)
        return ForwardResult(f.rows, logits, first, f.refresh, counted, at)


class _RecordedRows(StepRows):
    """StepRows that remember which host rows each device row tensor stands for (suffix dropout builds a row's
    pruned canvas from its host-side draw)."""

    def __init__(self, host_rows: list[int], rows: torch.Tensor, record: dict) -> None:
        super().__init__(host_rows, rows)
        self.record = record
        record[id(rows)] = (rows, host_rows)

    def device(self, host_rows: list[int]) -> torch.Tensor:
        out = super().device(host_rows)
        self.record[id(out)] = (out, list(host_rows))
        return out
