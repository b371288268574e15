"""The candidate-confidence fast path against a plain reference: float64 softmax over the allowed ids."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.decoding.confidence import allowed_max, candidate_predictions, row_max

pytestmark = [pytest.mark.fast, pytest.mark.golden]  # golden: bit equality between code paths, under every kernel width


def reference(logits: torch.Tensor, forbidden: list[int], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x0 = first argmax over the allowed ids, confidence = its probability (softmax over the allowed ids)."""
    work = logits.to(dtype).clone()
    work[:, forbidden] = float("-inf")
    x0 = work.argmax(dim=-1)
    return x0, torch.softmax(work, dim=-1).gather(1, x0[:, None]).squeeze(1)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), vocab=st.integers(2, 40), seed=st.integers(0, 10_000), levels=st.integers(1, 5),
       forbid=st.lists(st.integers(0, 39), max_size=3), in_dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       out_dtype=st.sampled_from([torch.float64, torch.float32]),
       offset=st.sampled_from([0.0, -650.0, -300.0, 300.0, 700.0, 3000.0]))
def test_fast_top1_matches_the_reference(n, vocab, seed, levels, forbid, in_dtype, out_dtype, offset):
    """Ties, forbidden ids, and logits far from 0 (float64 skips the shift by the max inside +-600 only)."""
    g = torch.Generator().manual_seed(seed)
    # few distinct levels: ties everywhere, often on a forbidden id
    logits = (torch.randint(0, levels, (n, vocab), generator=g) * 0.75 + offset).to(in_dtype)
    forbidden = sorted({f % vocab for f in forbid} - {vocab - 1})  # keep one id allowed
    x0, conf = candidate_predictions(logits, [n], dtype=out_dtype, forbidden_token_ids=forbidden)
    ref_x0, ref_conf = reference(logits, forbidden, out_dtype)
    assert torch.equal(x0, ref_x0)
    assert conf.dtype == out_dtype
    tol = 1e-14 if out_dtype == torch.float64 else 1e-6
    assert torch.allclose(conf, ref_conf, rtol=tol, atol=0)


def test_allowed_max_masks_only_rows_whose_max_is_excluded():
    logits = torch.tensor([[0.0, 5.0, 1.0, 1.0], [3.0, 2.0, 0.0, 3.0], [9.0, 9.0, 9.0, 9.0]])
    values, index, overall = allowed_max(logits, [1, 0])
    assert index.tolist() == [2, 3, 2]  # first of the tied allowed maxima
    assert values.tolist() == [1.0, 3.0, 9.0]
    assert overall.tolist() == [5.0, 3.0, 9.0]
    assert logits[0, 1] == 5.0  # the caller's logits are not touched


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 5), vocab=st.sampled_from([96, 128, 130, 256, 384, 1000, 1024, 4096 + 64, 126464]),
       seed=st.integers(0, 10_000), levels=st.integers(1, 4), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       neg_inf=st.booleans())
def test_row_max_equals_max_dim_values_and_first_index(n, vocab, seed, levels, dtype, neg_inf):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(0, levels, (n, vocab), generator=g).to(dtype)  # ties across runs and inside them
    if neg_inf:
        logits[0] = float("-inf")
    values, index = row_max(logits)
    ref = logits.max(dim=-1)
    assert torch.equal(values, ref.values) and torch.equal(index, ref.indices)


def test_large_vocabulary_row_with_a_dominant_forbidden_id():
    """The excluded id holds nearly all the mass: the confidence is renormalised over the rest."""
    logits = torch.zeros(2, 126464)
    logits[:, 126336] = 30.0
    logits[0, 7] = 2.0
    x0, conf = candidate_predictions(logits, [2], forbidden_token_ids=[126336])
    ref_x0, ref_conf = reference(logits, [126336], torch.float64)
    assert x0.tolist() == [7, 0] and torch.equal(x0, ref_x0)
    assert torch.allclose(conf, ref_conf, rtol=1e-12, atol=0)


def reference_published(logits: torch.Tensor, forbidden: list[int], unchosen: list[int], dtype: torch.dtype):
    """The published rule: softmax over every id but the banned ones; x0 never an unchosen (mask) id."""
    work = logits.to(dtype).clone()
    work[:, forbidden] = float("-inf")
    probs = torch.softmax(work, dim=-1)
    choice = work.clone()
    choice[:, unchosen] = float("-inf")
    x0 = choice.argmax(dim=-1)
    return x0, probs.gather(1, x0[:, None]).squeeze(1)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), vocab=st.integers(3, 40), seed=st.integers(0, 10_000), levels=st.integers(1, 5),
       forbid=st.lists(st.integers(0, 39), max_size=2), mask=st.integers(0, 39),
       out_dtype=st.sampled_from([torch.float64, torch.float32]))
def test_mask_token_stays_in_the_denominator(n, vocab, seed, levels, forbid, mask, out_dtype):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(0, levels, (n, vocab), generator=g).float() * 1.5
    mask = mask % vocab
    forbidden = sorted({f % vocab for f in forbid} - {mask, (mask + 1) % vocab})  # one id stays choosable
    x0, conf = candidate_predictions(logits, [n], dtype=out_dtype, forbidden_token_ids=forbidden,
                                     unchosen_token_ids=[mask])
    ref_x0, ref_conf = reference_published(logits, forbidden, [mask], out_dtype)
    assert torch.equal(x0, ref_x0) and mask not in x0.tolist()
    assert torch.allclose(conf, ref_conf, rtol=1e-14 if out_dtype == torch.float64 else 1e-6, atol=0)
    # against the earlier rule (mask out of the softmax): smaller by the factor 1 - p_mask
    _, earlier = candidate_predictions(logits, [n], dtype=out_dtype, forbidden_token_ids=[*forbidden, mask])
    work = logits.double().clone()
    work[:, forbidden] = float("-inf")
    p_mask = torch.softmax(work, dim=-1)[:, mask].to(out_dtype)
    assert torch.allclose(conf, earlier * (1 - p_mask), rtol=1e-12 if out_dtype == torch.float64 else 1e-5)


@pytest.mark.parametrize("measure", ["margin", "neg_entropy", "random"])
def test_other_measures_never_choose_the_mask_and_keep_it_in_the_softmax(measure):
    logits = torch.tensor([[4.0, 1.0, 0.5, 3.0], [0.0, 2.0, 2.0, 5.0]])
    gens = [torch.Generator().manual_seed(0)]
    x0, conf = candidate_predictions(logits, [2], measure=measure, unchosen_token_ids=[3], generators=gens)
    assert 3 not in x0.tolist() and x0.tolist() == [0, 1]
    p = torch.softmax(logits.double(), dim=-1)
    if measure == "margin":  # the two most probable choosable ids, probabilities over the whole vocabulary
        assert torch.allclose(conf, torch.stack([p[0, 0] - p[0, 1], p[1, 1] - p[1, 2]]))
    if measure == "neg_entropy":
        assert torch.allclose(conf, (p * p.log()).sum(-1))
