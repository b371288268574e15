"""d2Cache (Kamichanw/d2Cache): one full forward, then every step refreshes the K/V of a chosen set of positions.

After each step the next forward's queries are chosen per row (:func:`next_queries`): the ``current_k`` masked
positions with the highest first-step confidence x certainty density (the open block's first, searched up to the
block end that holds ``current_k`` masks), the positions just decoded, the smallest set of the rest whose attention
rollout importance reaches ``rollout_p`` (at least one), and, with ``inflate_w``, every gap of at most that width
between chosen positions. The storage (:mod:`dllm_bench.models.cache.rollout`) keeps every position's K/V and the
rollout; there is never a full refresh after the first forward. Candidates left out of a forward get zero logits, as
in the published forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.caches.base import (
    CacheBase,
    Canvas,
    Cohort,
    Forward,
    HostView,
    StepRows,
    ascending_positions,
    register,
)
from dllm_bench.decoding.rules.certainty_prior import certainty_density
from dllm_bench.models.cache.rollout import RolloutKVCache


def nucleus(importance: torch.Tensor, top_p: float, eligible: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: the eligible positions of highest importance whose shares (of the eligible total) sum to at most
    ``top_p``, and at least the top one."""
    scores = torch.where(eligible, importance, 0.0)
    shares = scores / (scores.sum(dim=-1, keepdim=True) + 1e-9)
    order = torch.sort(shares, dim=-1, descending=True)
    keep = order.values.cumsum(dim=-1) <= top_p
    keep[:, 0] = True
    keep &= eligible.gather(1, order.indices)
    return torch.zeros_like(eligible).scatter(1, order.indices, keep)


def inflate(chosen: torch.Tensor, width: int) -> torch.Tensor:
    """``chosen`` [B, T] plus every position lying between two chosen ones at most ``width`` apart."""
    B, T = chosen.shape
    j = torch.arange(T, device=chosen.device).expand(B, -1)
    nxt = torch.where(chosen, j, T).flip(-1).cummin(dim=-1).values.flip(-1)
    prev = torch.where(chosen, j, -1).cummax(dim=-1).values
    return chosen | ((nxt - prev <= width) & (prev >= 0) & (nxt < T))


def masked_choice(first_conf: torch.Tensor, masked: torch.Tensor, open_block: torch.Tensor, current_k: int,
                  sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The masked positions [B, G] whose K/V the next forward refreshes, and their scores [B, G].

    ``open_block`` is the last step's block positions that were masked when it began (its candidates). Scores:
    first-step confidence x certainty density of the decoded positions, plus the batch's highest score on the open
    block; the top ``current_k`` masked positions are searched from the open block's first position to the end of
    the block (of the open block's size) that holds the ``current_k``-th masked position."""
    G = masked.shape[1]
    j = torch.arange(G, device=masked.device)
    size = open_block.sum(dim=1, keepdim=True).clamp(min=1)
    first = open_block.long().argmax(dim=1, keepdim=True)
    reached = masked.long().cumsum(dim=1) >= current_k
    kth = torch.where(reached.any(dim=1, keepdim=True), reached.long().argmax(dim=1, keepdim=True), G - 1)
    window = (j >= first) & (j < (kth // size + 1) * size)
    scores = first_conf * certainty_density(~masked, sigma).to(first_conf.dtype)
    scores = torch.where(open_block, scores + scores.max(), scores)
    top = torch.topk(torch.where(window & masked, scores, float("-inf")), k=min(current_k, G), dim=1).indices
    return torch.zeros_like(masked).scatter(1, top, True) & masked, scores


def next_queries(first_conf: torch.Tensor, masked: torch.Tensor, decoded: torch.Tensor, open_block: torch.Tensor,
                 importance: torch.Tensor, real: torch.Tensor, cache: D2Cache, shift: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The next forward's queries [B, T] (canvas positions; ``real`` [B, T] False on left padding) and the answer
    scores [B, G] of :func:`masked_choice`. ``decoded``: the positions the last step committed; ``shift`` 1 for
    Dream's shifted logits (the published forward then queries the position before each chosen masked one, and the
    last prompt position exactly when the first answer position is chosen)."""
    chosen, scores = masked_choice(first_conf, masked, open_block, cache.current_k, cache.sigma)
    P = real.shape[1] - masked.shape[1]
    first_chosen = chosen[:, 0]
    if shift:  # Dream: a masked position's logits come from the position before it, which is queried instead
        chosen = torch.cat([chosen[:, 1:], torch.zeros_like(chosen[:, :1])], dim=1)
    query = torch.cat([torch.zeros_like(real[:, :P]), chosen | decoded], dim=1)
    query |= nucleus(importance, cache.rollout_p, real & ~query)
    if shift:
        query[:, P - 1] = first_chosen
    return (inflate(query, cache.inflate_w) & real if cache.inflate_w > 0 else query), scores


def query_positions(query: torch.Tensor, importance: torch.Tensor, scores: torch.Tensor, real: torch.Tensor,
                    top_up: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Ascending positions [B, Q] of each row's queries, Q the most any row has (one host read), and the count of
    each row's own. A row with fewer repeats its last query (it computes nothing more), or with ``top_up`` takes
    the rest of the published top-up: answer positions by score, then the others by importance."""
    counts = query.sum(dim=1)
    Q = int(counts.max())
    if top_up:
        query = _top_up(query, Q, importance, scores, real)
    return ascending_positions(query, Q)[0], counts


def _top_up(query: torch.Tensor, Q: int, importance: torch.Tensor, scores: torch.Tensor,
            real: torch.Tensor) -> torch.Tensor:
    """Each row's queries topped up to Q: unchosen answer positions first (above every other), by score, then the
    rest by importance."""
    G = scores.shape[1]
    rank = torch.where(query, float("-inf"), importance.to(scores.dtype))
    rank[:, -G:] += rank.max() + scores
    rank = torch.where(query | ~real, float("-inf"), rank)
    need = Q - query.sum(dim=1, keepdim=True)
    order = torch.topk(rank, k=Q, dim=1).indices  # distinct positions: each slot writes its own
    pick = torch.arange(Q, device=query.device) < need
    return query | torch.zeros_like(query).scatter(1, order, pick)


@register
@dataclass(frozen=True)
class D2Cache(CacheBase):
    """d2Cache's dual adaptive cache; defaults = its published d2Cache runs (configs/cache/d2cache.yaml and
    configs/gen_args.py: rollout_p 0.1, current_k 32, sigma 10, inflate_w 0; its class default inflate_w 4 is the
    semi-AR preset, d2cache_semi_ar.yaml). ``top_up``: the published batch loop: rows of a batch query equally many
    positions, the extra ones chosen as the published forward does, and a row whose block is full waits out of the
    forwards (its plan kept) until every row's is (False: a row repeats its own last query and moves on at once;
    rows stay independent)."""

    rollout_p: float = 0.1
    current_k: int = 32
    sigma: float = 10.0
    inflate_w: int = 0
    top_up: bool = False
    name: ClassVar[str] = "d2cache"
    sync_budget: ClassVar[int] = 5  # two more than the engine's: its query set's width and the candidates that forward queried

    @property
    def holds_full_blocks(self) -> bool:
        return self.top_up

    def check(self) -> None:
        if not 0 <= self.rollout_p <= 1:
            raise ValueError(f"d2cache rollout_p must be in [0, 1], got {self.rollout_p}")
        if self.current_k < 1:
            raise ValueError(f"d2cache current_k must be >= 1, got {self.current_k}")
        if not self.sigma > 0:
            raise ValueError(f"d2cache sigma must be > 0, got {self.sigma}")
        if self.inflate_w < 0:
            raise ValueError(f"d2cache inflate_w must be >= 0 (0 = no inflation), got {self.inflate_w}")

    def check_combination(self, *, policy: Any, rule: Any, gen_length: int, block_length: int) -> None:
        if policy.name != "blocks":
            raise ValueError(f"d2cache runs d2Cache's block loop: policy must be 'blocks', got {policy.name!r}")

    def session(self, canvas: Canvas) -> D2Session:
        return D2Session(self, canvas)


class D2Session:
    """One cohort for the whole decode; rows that finish leave it. Forward positions: the prompt's real tokens and
    the answer on the first forward, then each row's own queries.

    Each row's next queries are planned from the step it last took part in, together with the rows of that step
    (the published loop plans at a step's end over the rows it ran). With ``top_up`` a row whose block is full waits
    out of the forwards (the engine holds it there, :attr:`D2Cache.holds_full_blocks`) and keeps its plan."""

    def __init__(self, cache: D2Cache, canvas: Canvas) -> None:
        self.cache, self.canvas = cache, canvas
        self.cohort: Cohort | None = None
        self.first_conf: torch.Tensor | None = None  # [b, G] the first forward's confidence at its masked positions
        self.masked: torch.Tensor | None = None  # [b, G] masked when the last step began
        self.open_block: torch.Tensor | None = None  # [b, G] the last step's block positions masked then
        self.ran: list[bool] = []  # per cohort row: it took part in the last forward
        self.query: torch.Tensor | None = None  # [b, T] each row's planned queries
        self.scores: torch.Tensor | None = None  # [b, G] and the answer scores of that plan
        self._bounds: tuple[list[int], list[int], torch.Tensor] | None = None  # block bounds, copied to the device

    def forwards(self, view: HostView, rows: StepRows, ids: torch.Tensor) -> Iterator[Forward]:
        P, T = self.canvas.prompt_length, self.canvas.length
        if self.cohort is None:
            self.cohort = Cohort(rows.device(view.rows), list(view.rows), RolloutKVCache())
            self._remember(view, ids)
            self.ran = [True] * len(view.rows)
            yield Forward(self.cohort.rows, self.cohort.storage, refresh=True, count=T - P, count_prompt=True)
            return
        cohort = self.cohort
        active = set(view.rows)
        keep = [r in active for r in cohort.host_rows]
        if not all(keep):
            kept = [i for i, k in enumerate(keep) if k]
            index = torch.tensor(kept, dtype=torch.long, device=cohort.rows.device)
            self.masked, self.open_block = self.masked[index], self.open_block[index]
            if self.first_conf is not None:
                self.first_conf = self.first_conf[index]
            if self.query is not None:
                self.query, self.scores = self.query[index], self.scores[index]
            self.ran = [self.ran[i] for i in kept]
        if not cohort.shrink(keep, rows):
            raise RuntimeError(f"rows {view.rows} are not in the d2Cache cohort {cohort.host_rows} (engine bug)")
        storage: RolloutKVCache = cohort.storage
        if self.first_conf is None:
            self.first_conf = self._first_confidence(storage)
            storage.first_output = None
        masked = ids.index_select(0, cohort.rows)[:, P:] == self.canvas.mask_token_id
        real = torch.arange(T, device=masked.device) >= (P - self.canvas.prompt_real.index_select(0, cohort.rows))[:, None]
        self._plan(masked, real, storage.importance)
        G = T - P
        # a held row's block is full: every answer position it still has masked lies past its block
        go = [not (self.cache.top_up and view.masked[r] == G - view.block_hi[r]) for r in cohort.host_rows]
        sub = None if all(go) else torch.tensor([i for i, g in enumerate(go) if g], device=masked.device)
        pick = (lambda t: t) if sub is None else (lambda t: t.index_select(0, sub))
        positions, counts = query_positions(pick(self.query), pick(storage.importance), pick(self.scores), pick(real),
                                            self.cache.top_up)
        self._remember(view, ids)
        self.ran = go
        storage.select_rows(sub)
        yield Forward(pick(cohort.rows), storage, refresh=False, count=counts, positions=positions, unqueried_zero=True)
        storage.select_rows(None)

    def _plan(self, masked: torch.Tensor, real: torch.Tensor, importance: torch.Tensor) -> None:
        """The next queries and answer scores of the rows that ran the last forward, planned together as a batch;
        the other rows keep theirs."""
        decoded = self.masked & ~masked
        if all(self.ran):
            self.query, self.scores = next_queries(self.first_conf, masked, decoded, self.open_block, importance, real,
                                                   self.cache, self.canvas.shift)
            return
        ran = torch.tensor([i for i, r in enumerate(self.ran) if r], device=masked.device)
        parts = (self.first_conf, masked, decoded, self.open_block, importance, real)
        query, scores = next_queries(*(t.index_select(0, ran) for t in parts), self.cache, self.canvas.shift)
        self.query = self.query.index_copy(0, ran, query)
        self.scores = self.scores.index_copy(0, ran, scores)

    def _remember(self, view: HostView, ids: torch.Tensor) -> None:
        """The masks and the open block of the step about to run (the next plan's "last step")."""
        P = self.canvas.prompt_length
        rows = self.cohort.rows
        masked = ids.index_select(0, rows)[:, P:] == self.canvas.mask_token_id
        lo, hi = self._block_bounds(view, masked.device)
        j = torch.arange(masked.shape[1], device=masked.device)
        self.masked, self.open_block = masked, masked & (j >= lo) & (j < hi)

    def _block_bounds(self, view: HostView, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The cohort's block bounds [b, 1] each on the device, copied from the host only when they change (at a
        block's start or when rows leave), not every step."""
        lo = [view.block_lo[r] for r in self.cohort.host_rows]
        hi = [view.block_hi[r] for r in self.cohort.host_rows]
        if self._bounds is None or self._bounds[0] != lo or self._bounds[1] != hi:
            self._bounds = (lo, hi, torch.tensor([lo, hi], device=device).unsqueeze(2))
        return self._bounds[2][0], self._bounds[2][1]

    def _first_confidence(self, storage: RolloutKVCache) -> torch.Tensor:
        """Top-1 softmax probability (in the logits' dtype, over the whole vocabulary) of the first forward at every
        answer position, -inf where it was not masked."""
        model, P = self.canvas.model, self.canvas.prompt_length
        if model is None or storage.first_output is None:
            raise RuntimeError("d2cache reads its first forward's logits: the runner must give the session the model")
        shift = self.canvas.shift  # Dream: position i's logits come from the state at i - 1
        h = storage.first_output[:, P - shift: storage.first_output.shape[1] - shift]
        logits = model.lm_head(model.norm(h))
        conf = torch.softmax(logits, dim=-1).max(dim=-1).values
        return torch.where(self.masked, conf, float("-inf"))
