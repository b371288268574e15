"""Two measured facts about the CPU kernels that docs/differences.md rests on, asserted where they were measured
(tests/fixtures/recorded_on.json) and skipped elsewhere (they are facts about this torch on this CPU, not about
our code):

- ``claim:topk_tie_order``: ``torch.topk`` returns the lowest of tied maxima only in rows of 64 or more (the ties
  row: which tied position a published loop commits depends on its row's width);
- ``claim:sdpa_query_order``: the CPU attention kernel can round a query by its place among the queries (the
  V-verify row: ``dllm verify_compat=True`` keeps the picked rows in ``torch.topk``'s order, as the published hook
  gathers them).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.machine import recording

TIES = recording("claim:topk_tie_order")
QUERY_ORDER = recording("claim:sdpa_query_order")


def test_topk_returns_the_lowest_tied_index_only_in_long_rows():
    if not TIES.here():
        pytest.skip(TIES.mismatch())
    first = {n: int(torch.topk(torch.ones(n), 1).indices) for n in (4, 8, 16, 24, 32, 48, 63, 64, 100, 200)}
    assert first == {4: 2, 8: 6, 16: 10, 24: 15, 32: 22, 48: 33, 63: 41, 64: 0, 100: 0, 200: 0}
    assert torch.topk(torch.ones(64), 2).indices.tolist() == [42, 43]


def _order_changes_bits(queries: int, keys: int, g: torch.Generator, trials: int = 5) -> bool:
    """Whether permuting ``queries`` random queries over ``keys`` keys changes any output bit of SDPA (4 heads of
    32, the tiny LLaDA's shape) in one of ``trials`` draws."""
    for _ in range(trials):
        q, k, v = (torch.randn(1, 4, t, 32, generator=g) for t in (queries, keys, keys))
        perm = torch.randperm(queries, generator=g)
        if not torch.equal(F.scaled_dot_product_attention(q, k, v)[:, :, perm],
                           F.scaled_dot_product_attention(q[:, :, perm], k, v)):
            return True
    return False


def test_attention_rounds_a_query_by_its_place_among_the_queries():
    """Over 74 keys (a prompt of 42 and an answer of 32), at one thread: 33-35 and 65-67 queries (a prompt refresh
    with V-verify at gen 32, rho 0.75 runs 42 + 24 = 66), no other count."""
    if not QUERY_ORDER.here():
        pytest.skip(QUERY_ORDER.mismatch())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        sensitive = [n for n in range(1, 75) if _order_changes_bits(n, 74, g)]
    finally:
        torch.set_num_threads(threads)
    assert sensitive == [33, 34, 35, 65, 66, 67]
