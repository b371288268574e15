"""The candidate-confidence fast path against a plain reference: float64 softmax over the allowed ids."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.decoding.confidence import allowed_max, candidate_predictions


def reference(logits: torch.Tensor, forbidden: list[int], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x0 = first argmax over the allowed ids, confidence = its probability (softmax over the allowed ids)."""
    work = logits.to(dtype).clone()
    work[:, forbidden] = float("-inf")
    x0 = work.argmax(dim=-1)
    return x0, torch.softmax(work, dim=-1).gather(1, x0[:, None]).squeeze(1)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), vocab=st.integers(2, 40), seed=st.integers(0, 10_000), levels=st.integers(1, 5),
       forbid=st.lists(st.integers(0, 39), max_size=3), in_dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       out_dtype=st.sampled_from([torch.float64, torch.float32]))
def test_fast_top1_matches_the_reference(n, vocab, seed, levels, forbid, in_dtype, out_dtype):
    g = torch.Generator().manual_seed(seed)
    # few distinct levels: ties everywhere, often on a forbidden id
    logits = torch.randint(0, levels, (n, vocab), generator=g).to(in_dtype) * 0.75
    forbidden = sorted({f % vocab for f in forbid} - {vocab - 1})  # keep one id allowed
    x0, conf = candidate_predictions(logits, [n], dtype=out_dtype, forbidden_token_ids=forbidden)
    ref_x0, ref_conf = reference(logits, forbidden, out_dtype)
    assert torch.equal(x0, ref_x0)
    assert conf.dtype == out_dtype
    tol = 1e-14 if out_dtype == torch.float64 else 1e-6
    assert torch.allclose(conf, ref_conf, rtol=tol, atol=0)


def test_allowed_max_masks_only_rows_whose_max_is_excluded():
    logits = torch.tensor([[0.0, 5.0, 1.0, 1.0], [3.0, 2.0, 0.0, 3.0], [9.0, 9.0, 9.0, 9.0]])
    values, index = allowed_max(logits, [1, 0])
    assert index.tolist() == [2, 3, 2]  # first of the tied allowed maxima
    assert values.tolist() == [1.0, 3.0, 9.0]
    assert logits[0, 1] == 5.0  # the caller's logits are not touched


def test_large_vocabulary_row_with_a_dominant_forbidden_id():
    """The excluded id holds nearly all the mass: the confidence is renormalised over the rest."""
    logits = torch.zeros(2, 126464)
    logits[:, 126336] = 30.0
    logits[0, 7] = 2.0
    x0, conf = candidate_predictions(logits, [2], forbidden_token_ids=[126336])
    ref_x0, ref_conf = reference(logits, [126336], torch.float64)
    assert x0.tolist() == [7, 0] and torch.equal(x0, ref_x0)
    assert torch.allclose(conf, ref_conf, rtol=1e-12, atol=0)
