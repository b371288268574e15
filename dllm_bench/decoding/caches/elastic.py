"""Elastic-Cache (Nguyen-Tri, Ranjan, Shen: "Attention Is All You Need for KV Cache in Diffusion LLMs", arXiv
2510.14973, Oct 2025), implemented from the paper: its code (VILA-Lab/Elastic-Cache) could not be obtained here.

What the paper describes, and where it lives here (section names of the paper):

- Sliding-window decoding (Sec. 3, "sliding window"; window ``beta``, default 16): each step recomputes the
  leftmost ``window`` masked positions M_beta; masked positions beyond it keep the keys and values they were last
  computed with (the paper's block caching of distant MASK tokens: they act as a length bias).
- Most-attended token (observation 3; per layer l): T^l = argmax over the decoded (not masked) positions k of
  alpha_k = sum over the window's queries q and the heads of the attention S_{q,k}; ``track_num`` tokens per layer
  (default 1); the union over layers is tracked at the next step (its queries include them).
- Attention-aware drift test (per layer l, in the order the layers run): sigma^l = cos(S^{t-1}_T, S^t_T), the
  cosine similarity of the tracked tokens' attention rows over the keys before and after this step's keys are
  written; a refresh is triggered at the first layer l where sigma^l < ``min_cosine`` (default 0.9).
- Depth-aware refresh (observation 2): layers up to l keep what the step computed at its queries only; layers
  l + 1 .. L - 1 are recomputed at every position, starting from layer l + 1's stored input (the queries' rows
  fresh, the others as last computed), overwriting their stored keys and values.
- The first forward of a decode computes everything; there is no periodic full refresh.

Where the paper is ambiguous and what we chose (docs/decoding.md, "Elastic-Cache"):

1. Several heads: sigma is the cosine over the keys per head, averaged over heads and tracked tokens (the paper
   writes one attention vector); the most-attended token sums the attention over heads and window queries.
2. Candidates: the engine's ``blocks`` policy decides what may be committed; the recomputed masks are the leftmost
   ``max(window, block_length)``, so the block's masks (the leftmost ones) always get fresh logits. With
   ``block_length <= window`` (the default 16 against blocks of 8..16) this is exactly the paper's M_beta; the paper
   commits inside the window, we commit inside the block.
3. Per row: every decision (window, tracked tokens, trigger layer) is taken per batch row; the paper's loop has
   batch 1.
4. The drift is measured at each layer during a forward over the queries only, and the refresh runs as a second
   forward over the rows that triggered (layers below the start skipped): one host read per step instead of one
   per layer. It computes what the layer-by-layer loop computes (layers after the trigger are recomputed from the
   same stored inputs); the query-only work of those layers in the first forward is wasted and counted.
5. ``refresh_drifting_layer`` (default False = the paper): True recomputes from the layer that drifted itself, so
   ``min_cosine`` above 1 refreshes every layer every step, which is the uncached decode exactly.

Forward positions (docs/counting.md): the first forward counts the real prompt and the answer; a step its own
queries (every layer); a refresh of layers s .. L - 1 counts the real prompt and answer weighted by the layers it
ran, round((prompt + answer) * (L - s) / L).
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
from dllm_bench.models.cache.elastic import ElasticKVCache


@register
@dataclass(frozen=True)
class ElasticCache(CacheBase):
    """Elastic-Cache: window ``window`` (beta), drift threshold ``min_cosine``, ``track_num`` tracked tokens per layer;
    defaults = the paper's LLaDA settings (beta 16, min_cosine 0.9, one token per layer)."""

    window: int = 16
    min_cosine: float = 0.9
    track_num: int = 1
    refresh_drifting_layer: bool = False
    name: ClassVar[str] = "elastic"
    sync_budget: ClassVar[int] = 4  # one more than dual: its refresh decision (the layer each row's drift test fired at)
    # per layer and position: k, v, and the rotated query and the input stream, each the size of attn / ffn's entry
    stores: ClassVar[tuple[str, ...]] = ("k", "v", "attn", "ffn")

    def check(self) -> None:
        if self.window < 1:
            raise ValueError(f"elastic window must be >= 1 (masked positions recomputed per step), got {self.window}")
        if not 0 <= self.min_cosine <= 2:
            raise ValueError(f"elastic min_cosine must be in [0, 2] (attention cosines lie in [0, 1]: 0 never "
                             f"refreshes, "
                             f"above 1 always), got {self.min_cosine}")
        if self.track_num < 1:
            raise ValueError(f"elastic track_num must be >= 1 (most-attended tokens per layer), got {self.track_num}")

    def check_combination(self, *, policy: Any, rule: Any, gen_length: int, block_length: int) -> None:
        if getattr(policy, "name", None) != "blocks":
            raise ValueError(f"cache 'elastic' recomputes the leftmost masks, which hold the candidates only under "
                             f"policy 'blocks'; got policy {getattr(policy, 'name', None)!r}")
        if hasattr(rule, "watch"):
            raise ValueError(f"cache 'elastic' computes logits only inside its window; rule "
                             f"{getattr(rule, 'name', None)!r} reads positions beyond the block")

    def session(self, canvas: Canvas) -> ElasticSession:
        return ElasticSession(self, canvas)


class ElasticSession:
    """One cohort for the whole decode; rows that finish leave it. Per step: one forward over each row's queries
    (tracked tokens, the positions decoded last step, the window's masks and for Dream the position before each),
    then one refresh forward per distinct start layer over the rows whose drift test fired."""

    def __init__(self, cache: ElasticCache, canvas: Canvas) -> None:
        self.cache, self.canvas = cache, canvas
        self.cohort: Cohort | None = None
        self.masked: torch.Tensor | None = None  # [b, G] masked when the last step began
        self.masked_count: dict[int, int] = {}
        self.tracked: torch.Tensor | None = None  # [b, n]
        self.tracked_valid: torch.Tensor | None = None

    def _layers(self) -> int:
        model = self.canvas.model
        if model is None:
            raise RuntimeError("elastic needs the network's depth: the runner must give the session the model")
        return model.config.n_layers

    def forwards(self, view: HostView, rows: StepRows, ids: torch.Tensor) -> Iterator[Forward]:
        if view.masked is None:
            raise ValueError("cache 'elastic' needs the masked counts of the host view")
        P, T = self.canvas.prompt_length, self.canvas.length
        if self.cohort is None:
            storage = ElasticKVCache(self._layers(), self.cache.track_num)
            self.cohort = Cohort(rows.device(view.rows), list(view.rows), storage)
        else:
            self._shrink(view, rows)
        cohort, storage = self.cohort, self.cohort.storage
        canvas = ids.index_select(0, cohort.rows)
        masked = canvas[:, P:] == self.canvas.mask_token_id
        width = max(self.cache.window, max(view.block_hi[r] - view.block_lo[r] for r in cohort.host_rows))
        in_window = masked & (masked.long().cumsum(dim=1) <= width)
        n_window = max(1, max(min(view.masked[r], width) for r in cohort.host_rows))
        window_pos = torch.cat([in_window.new_zeros(in_window.shape[0], P), in_window], dim=1)
        window, window_valid, _ = ascending_positions(window_pos, n_window)
        real = torch.arange(T, device=ids.device) >= (P - self.canvas.prompt_real.index_select(0, cohort.rows))[:, None]
        excluded = (canvas == self.canvas.mask_token_id) | ~real
        first = self.masked is None
        storage.plan(window, window_valid, excluded, None if first else self.tracked,
                     None if first else self.tracked_valid)
        if first:
            yield Forward(cohort.rows, storage, refresh=True, count=T - P, count_prompt=True)
        else:
            query = self.tracked.new_zeros(canvas.shape, dtype=torch.bool)
            query.scatter_(1, self.tracked, True)
            query[:, P:] |= in_window | (self.masked & ~masked)
            if self.canvas.shift:  # Dream: a masked position's logits come from the position before it
                query[:, P - 1: T - 1] |= in_window
            new = max(self.masked_count[r] - view.masked[r] for r in cohort.host_rows)
            bound = min(T, self.tracked.shape[1] + new + n_window * (1 + self.canvas.shift))
            positions, _, counts = ascending_positions(query, bound)
            yield Forward(cohort.rows, storage, refresh=False, count=counts, positions=positions)
            yield from self._refreshes(storage, cohort, rows)
        self._remember(storage, masked, view)

    def _refreshes(self, storage: ElasticKVCache, cohort: Cohort, rows: StepRows) -> Iterator[Forward]:
        """After a step's query forward: one forward per distinct start layer over the rows whose drift fired."""
        L = storage.n_layers
        fired = storage.sigma < self.cache.min_cosine  # [L, b]
        layer = torch.where(fired.any(dim=0), fired.long().argmax(dim=0), L)
        start = layer + (0 if self.cache.refresh_drifting_layer else 1)
        starts = start.tolist()  # the step's refresh decision: one host read
        n = self.canvas.prompt_real.index_select(0, cohort.rows) + (self.canvas.length - self.canvas.prompt_length)
        for s in sorted({s for s in starts if s < L}):
            local = [i for i, t in enumerate(starts) if t == s]
            if len(local) == len(starts):
                index, rows_g, n_g = None, cohort.rows, n
            else:
                index = torch.tensor(local, dtype=torch.long, device=cohort.rows.device)
                rows_g, n_g = rows.device([cohort.host_rows[i] for i in local]), n.index_select(0, index)
            storage.resume(s, index)
            yield Forward(rows_g, storage, refresh=False, count=(2 * n_g * (L - s) + L) // (2 * L))
        storage.resume(0, None)

    def _remember(self, storage: ElasticKVCache, masked: torch.Tensor, view: HostView) -> None:
        """The masks of the step that ran and the tokens the next step tracks (each layer's most attended)."""
        self.masked = masked
        self.masked_count = {r: view.masked[r] for r in self.cohort.host_rows}
        tracked = torch.sort(torch.cat(storage.most_attended, dim=1), dim=1).values
        valid = torch.ones_like(tracked, dtype=torch.bool)
        valid[:, 1:] = tracked[:, 1:] != tracked[:, :-1]  # each token once
        self.tracked, self.tracked_valid = tracked, valid

    def _shrink(self, view: HostView, rows: StepRows) -> None:
        cohort = self.cohort
        active = set(view.rows)
        keep = [r in active for r in cohort.host_rows]
        if not all(keep):
            index = torch.tensor([i for i, k in enumerate(keep) if k], dtype=torch.long, device=cohort.rows.device)
            self.masked, self.tracked, self.tracked_valid = (t.index_select(0, index) for t in
                                                             (self.masked, self.tracked, self.tracked_valid))
        if not cohort.shrink(keep, rows):
            raise RuntimeError(f"rows {view.rows} are not in the Elastic-Cache cohort {cohort.host_rows} (engine bug)")
