"""Few-shot example choice identical to lm-eval's samplers, but independent of sharding and limits."""

from __future__ import annotations

from collections.abc import Callable
from random import Random


class SeededFewshotSampler:
    """Replays lm-eval's `default` sampler: one `Random(seed)`, one `sample()` call per evaluated doc.

    lm-eval draws the shots of the k-th doc a rank processes with the k-th call on a generator seeded
    with `fewshot_random_seed` (1234). We always use the doc's global index k, so a single-process
    lm-eval run and any of our shards/limits give every doc the same shots.
    `same_split=True` mirrors lm-eval when shots come from the evaluated split: draw n+1, drop copies
    of the evaluated doc, keep n.
    """

    def __init__(
        self,
        pool_size: int,
        seed: int = 1234,
        same_split: bool = False,
        is_eval_doc: Callable[[int, int], bool] | None = None,
    ) -> None:
        if pool_size <= 0:
            raise ValueError(f"few-shot pool is empty (pool_size={pool_size})")
        self.pool_size = pool_size
        self.seed = seed
        self.same_split = same_split
        # is_eval_doc(doc_index, pool_index): is this pool row a copy of the evaluated doc?
        self.is_eval_doc = is_eval_doc or (lambda doc_index, pool_index: doc_index == pool_index)
        self._rnd = Random(seed)
        self._draws: list[list[int]] = []
        self._drawn_for: tuple[int, int] | None = None

    def indices(self, doc_index: int, n: int) -> list[int]:
        """Pool indices of the n shots for the doc at global position `doc_index`."""
        if n == 0:
            return []
        if self._drawn_for is not None and self._drawn_for != (n, self.same_split):
            self._rnd, self._draws = Random(self.seed), []
        self._drawn_for = (n, self.same_split)
        while len(self._draws) <= doc_index:
            self._draws.append(self._next_draw(len(self._draws), n))
        return self._draws[doc_index]

    def _next_draw(self, doc_index: int, n: int) -> list[int]:
        pool = range(self.pool_size)
        if not self.same_split:
            return self._rnd.sample(pool, n)
        def drop(j: int) -> bool:
            return self.is_eval_doc(doc_index, j)

        kept = [j for j in self._rnd.sample(pool, n + 1) if not drop(j)][:n]
        if len(kept) < n:  # duplicates of the eval doc were drawn: lm-eval resamples without them
            kept = self._rnd.sample([j for j in pool if not drop(j)], n)
        return kept
