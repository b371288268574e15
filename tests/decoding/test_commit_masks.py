"""Rules: hand-computed cases (ties, factor compat off-by-one) and hypothesis properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.decoding.commit_masks import (
    factor_commit_mask,
    frechet_commit_mask,
    frechet_gap_sorted,
    oracle_commit_mask,
    threshold_commit_mask,
    topk_commit_mask,
)

pytestmark = pytest.mark.fast  # the inner loop: make test-fast

D = torch.float64


def t(values, dtype=D):
    return torch.tensor([values], dtype=dtype)


def mask(bits):
    return torch.tensor([bits], dtype=torch.bool)


# ---------------------------------------------------------------- hand-computed cases


def test_topk_picks_most_confident_and_breaks_ties_by_position():
    conf = t([0.5, 0.9, 0.5, 0.5, 0.1])
    cand = mask([1, 1, 1, 1, 1])
    assert topk_commit_mask(conf, cand, 2).tolist() == [[True, True, False, False, False]]
    assert topk_commit_mask(conf, cand, 0).tolist() == [[False] * 5]


def test_topk_per_row_k_and_never_a_non_candidate():
    conf = torch.tensor([[0.9, 0.8, 0.7], [0.9, 0.8, 0.7]], dtype=D)
    cand = torch.tensor([[0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    got = topk_commit_mask(conf, cand, torch.tensor([5, 1]))
    assert got.tolist() == [[False, True, True], [True, False, False]]


def test_threshold_commits_all_at_or_above_tau_else_top1():
    cand = mask([1, 1, 1, 0])
    assert threshold_commit_mask(t([0.95, 0.9, 0.3, 0.99]), cand, 0.9).tolist() == [[True, True, False, False]]
    assert threshold_commit_mask(t([0.2, 0.4, 0.3, 0.99]), cand, 0.9).tolist() == [[False, True, False, False]]


def test_factor_paper_rule_hand_case():
    # sorted c = 0.9, 0.8, 0.6; (n+1)(1-c): 0.2, 0.6, 1.6; f = 0.7 -> n = 2
    conf, cand = t([0.6, 0.9, 0.8]), mask([1, 1, 1])
    assert factor_commit_mask(conf, cand, 0.7).tolist() == [[False, True, True]]
    # at equality the strict rule rejects, the compat (<=) rule accepts: f = 0.6 exactly at n = 2
    assert factor_commit_mask(t([0.5, 0.75, 0.75]), cand, 0.75).tolist() == [[False, True, False]]
    assert factor_commit_mask(t([0.5, 0.75, 0.75]), cand, 0.75, compat=True).tolist() == [[True, True, True]]


def test_factor_compat_off_by_one_commits_the_failing_last_candidate():
    # sorted c = 0.95, 0.9, 0.1; scores 0.1, 0.3, 3.6; f = 1: paper commits 2, the code's loop commits 3
    conf, cand = t([0.95, 0.9, 0.1]), mask([1, 1, 1])
    assert factor_commit_mask(conf, cand, 1.0).sum().item() == 2
    assert factor_commit_mask(conf, cand, 1.0, compat=True).sum().item() == 3
    # a failure before the last element stops as in the paper
    conf4 = t([0.95, 0.9, 0.1, 0.05])
    assert factor_commit_mask(conf4, mask([1, 1, 1, 1]), 1.0, compat=True).sum().item() == 2


def test_factor_and_frechet_commit_one_when_nothing_passes():
    conf, cand = t([0.1, 0.2, 0.3]), mask([1, 1, 1])
    assert factor_commit_mask(conf, cand, 0.5).tolist() == [[False, False, True]]
    assert frechet_commit_mask(conf, cand, 0.5).tolist() == [[False, False, True]]


def test_frechet_hand_case_and_terms():
    # sorted c = 0.9, 0.8, 0.7. L = 0.9, 0.7, 0.4; U = 0.1, 0.2, 0.3; G = 0.8, 0.5, 0.1
    conf, cand = t([0.7, 0.9, 0.8]), mask([1, 1, 1])
    gap, core = frechet_gap_sorted(t([0.9, 0.8, 0.7]))
    assert torch.allclose(gap, t([0.8, 0.5, 0.1]))
    assert torch.allclose(core, t([0.8, 0.4, -0.2]))  # bonus = 0, 0.1, 0.3 = sum(c_j - c_n)
    assert frechet_commit_mask(conf, cand, 0.25).tolist() == [[False, True, True]]
    assert frechet_commit_mask(conf, cand, 0.05).tolist() == [[True, True, True]]
    # factor with f = 1 - 0.05 stops at n = 2 ((3+1)(1-0.7) = 1.2): Fréchet's heterogeneity bonus takes the third
    assert factor_commit_mask(conf, cand, 0.95).sum().item() == 2


def test_frechet_ties_commit_lower_positions_first():
    conf, cand = t([0.8, 0.95, 0.8, 0.8]), mask([1, 1, 1, 1])
    # sorted 0.95, 0.8, 0.8, 0.8: G = 0.9, 0.55, 0.35, 0.15 -> delta 0.3 commits 3
    assert frechet_commit_mask(conf, cand, 0.3).tolist() == [[True, True, True, False]]


def test_rows_without_candidates_commit_nothing():
    conf = torch.rand(2, 4, dtype=D)
    cand = torch.zeros(2, 4, dtype=torch.bool)
    for got in (threshold_commit_mask(conf, cand, 0.5), factor_commit_mask(conf, cand, 1.0),
                factor_commit_mask(conf, cand, 1.0, compat=True), frechet_commit_mask(conf, cand, 0.1),
                topk_commit_mask(conf, cand, 2)):
        assert not got.any()


def test_oracle_commits_matches_or_forces_top1_with_reference():
    conf = t([0.9, 0.2, 0.5])
    cand = mask([1, 1, 1])
    ref = torch.tensor([[7, 8, 9]])
    commit, forced = oracle_commit_mask(conf, cand, torch.tensor([[1, 8, 9]]), ref)
    assert commit.tolist() == [[False, True, True]] and not forced.any()
    commit, forced = oracle_commit_mask(conf, cand, torch.tensor([[1, 1, 1]]), ref)
    assert commit.tolist() == [[True, False, False]] and forced.tolist() == commit.tolist()


def test_per_row_parameters():
    conf = torch.tensor([[0.9, 0.8, 0.7]] * 2, dtype=D)
    cand = torch.ones(2, 3, dtype=torch.bool)
    got = frechet_commit_mask(conf, cand, torch.tensor([0.25, 0.05], dtype=D))
    assert got.sum(dim=1).tolist() == [2, 3]


# ---------------------------------------------------------------- properties

GRID = 64  # confidences k/64 and delta j/64 are exact in float64, so equalities are exact


@st.composite
def profiles(draw):
    batch = draw(st.integers(1, 4))
    length = draw(st.integers(1, 12))
    conf = draw(st.lists(st.lists(st.integers(0, GRID), min_size=length, max_size=length), min_size=batch, max_size=batch))
    cand = draw(st.lists(st.lists(st.booleans(), min_size=length, max_size=length), min_size=batch, max_size=batch))
    delta = draw(st.integers(0, GRID - 1)) / GRID
    return torch.tensor(conf, dtype=D) / GRID, torch.tensor(cand), delta


def _is_descending_prefix(conf, cand, commit):
    for b in range(conf.shape[0]):
        c = conf[b][cand[b]]
        chosen = commit[b][cand[b]]
        if chosen.any() and (~chosen).any() and c[chosen].min() < c[~chosen].max():
            return False
    return True


RULES = {
    "threshold": lambda c, m, d: threshold_commit_mask(c, m, 1 - d),
    "factor": lambda c, m, d: factor_commit_mask(c, m, 1 - d),
    "factor_compat": lambda c, m, d: factor_commit_mask(c, m, 1 - d, compat=True),
    "frechet": lambda c, m, d: frechet_commit_mask(c, m, d),
}


@pytest.mark.parametrize("rule", sorted(RULES))
@settings(max_examples=60, deadline=None)
@given(profiles())
def test_every_rule_commits_a_descending_prefix_of_candidates_and_at_least_one(rule, profile):
    conf, cand, delta = profile
    commit = RULES[rule](conf, cand, delta)
    assert not (commit & ~cand).any()
    assert torch.equal(commit.any(dim=1), cand.any(dim=1))
    assert _is_descending_prefix(conf, cand, commit)


@settings(max_examples=120, deadline=None)
@given(profiles())
def test_frechet_commits_at_least_as_many_as_factor_one_minus_delta(profile):
    conf, cand, delta = profile
    fr = frechet_commit_mask(conf, cand, delta).sum(dim=1)
    fa = factor_commit_mask(conf, cand, 1 - delta).sum(dim=1)
    assert (fr >= fa).all()


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 16), st.integers(0, GRID), st.integers(0, GRID - 1))
def test_frechet_with_equal_confidences_equals_factor(length, level, delta_units):
    conf = torch.full((1, length), level / GRID, dtype=D)
    cand = torch.ones(1, length, dtype=torch.bool)
    delta = delta_units / GRID
    assert torch.equal(frechet_commit_mask(conf, cand, delta), factor_commit_mask(conf, cand, 1 - delta))
