"""The field's rules (EB-Sampler, dParallel's entropy threshold, dInfer's hierarchy, LocalLeap, CreditDecoding)
against independent references written here with plain loops over positions (hypothesis), their parameter
checks and the combinations they refuse."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.decoding import build_cache, build_policy, check_combination
from dllm_bench.decoding.rules import StepContext, build_rule

NEW_RULES = ("eb_sampler", "entropy_threshold", "hierarchy", "local_leap", "credit")


def _ctx(conf: torch.Tensor, cand: torch.Tensor) -> StepContext:
    pred = torch.zeros(conf.shape, dtype=torch.long, device=conf.device)
    return StepContext(conf, cand, pred, cand.clone(), None)


@pytest.mark.parametrize(("name", "params", "match"), [
    ("eb_sampler", {"gama": 0.1}, r"^rule 'eb_sampler': unknown parameter gama=0.1; allowed: entropy_budget$"),
    ("eb_sampler", {"entropy_budget": -1.0}, r"entropy_budget must be >= 0"),
    ("entropy_threshold", {"max_entropy": -0.1}, r"max_entropy must be >= 0"),
    ("hierarchy", {"threshold": "high"}, r"parameter threshold='high' must be float or None"),
    ("hierarchy", {"low_threshold": 1.5}, r"low_threshold must be in \[0, 1\] or null"),
    ("local_leap", {"radius": 2.5}, r"parameter radius=2.5 must be int"),
    ("local_leap", {"threshold": 0.7}, r"relaxed_threshold <= threshold"),
    ("credit", {"beta": 1.5}, r"beta in \[0, 1\]"),
    ("credit", {"threshold": 0.0}, r"credit threshold must be in \(0, 1\]"),
])
def test_bad_parameters_are_refused_in_one_line(name, params, match):
    with pytest.raises(ValueError, match=match) as err:
        build_rule(name, **params)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------- independent references


def _candidates(conf: list[float], cand: list[bool], key) -> list[int]:
    return sorted((j for j in range(len(conf)) if cand[j]), key=lambda j: (key(conf[j]), j))


def ref_eb_sampler(conf: list[float], cand: list[bool], gamma: float) -> set[int]:
    """Rank by entropy (= -conf) ascending; take the longest prefix whose entropy sum minus its max is <= gamma."""
    ranked = _candidates(conf, cand, key=lambda c: -c)
    k = 0
    for n in range(1, len(ranked) + 1):
        ent = [-conf[j] for j in ranked[:n]]
        if sum(ent) - max(ent) <= gamma:
            k = n
    return set(ranked[:max(k, 1)]) if ranked else set()


def ref_entropy_threshold(conf: list[float], cand: list[bool], threshold: float) -> set[int]:
    ranked = _candidates(conf, cand, key=lambda c: -c)
    return {j for i, j in enumerate(ranked) if i == 0 or -conf[j] <= threshold}


def _top1(conf: list[float], cand: list[bool]) -> set[int]:
    ranked = _candidates(conf, cand, key=lambda c: -c)
    return set(ranked[:1])


def ref_hierarchy(conf: list[float], cand: list[bool], low: float | None, high: float | None) -> set[int]:
    out: set[int] = set()
    j = 0
    while j < len(conf):
        if not cand[j]:
            j += 1
            continue
        run = []
        while j < len(conf) and cand[j]:
            run.append(j)
            j += 1
        best = max(conf[i] for i in run)
        out |= {i for i in run if conf[i] == best and (low is None or conf[i] > low)}
    if high is not None:
        out |= {i for i in range(len(conf)) if cand[i] and conf[i] > high}
    return out | _top1(conf, cand)


def ref_local_leap(conf: list[float], cand: list[bool], tau: float, relaxed: float, radius: int) -> set[int]:
    anchors = [i for i in range(len(conf)) if cand[i] and conf[i] >= tau]
    near = {i for i in range(len(conf)) if cand[i] and conf[i] >= relaxed and any(abs(i - a) <= radius for a in anchors)}
    return set(anchors) | near | _top1(conf, cand)


# values on a grid of 1/64 so sums are exact in float64 and the reference's arithmetic cannot round differently
grid = st.integers(min_value=0, max_value=64).map(lambda v: v / 64)
rows = st.integers(min_value=1, max_value=12).flatmap(
    lambda n: st.tuples(st.lists(grid, min_size=n, max_size=n), st.lists(st.booleans(), min_size=n, max_size=n)))


def _run(rule, batch: list[tuple[list[float], list[bool]]], negate: bool = False) -> list[set[int]]:
    width = max(len(c) for c, _ in batch)
    conf = torch.full((len(batch), width), float("-inf"), dtype=torch.float64)
    cand = torch.zeros((len(batch), width), dtype=torch.bool)
    for b, (c, m) in enumerate(batch):
        values = torch.tensor(c, dtype=torch.float64)
        conf[b, :len(c)] = torch.where(torch.tensor(m), -values if negate else values, torch.tensor(float("-inf")))
        cand[b, :len(c)] = torch.tensor(m)
    mask = rule.commit(_ctx(conf, cand))
    assert not (mask & ~cand).any()
    return [set(torch.nonzero(mask[b]).flatten().tolist()) for b in range(len(batch))]


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, min_size=1, max_size=4), st.sampled_from([0.0, 1 / 64, 0.01, 0.1, 0.5, 2.0]))
def test_eb_sampler_matches_reference(batch, gamma):
    # confidences are negative entropies: an entropy h in [0, 1] on the grid
    got = _run(build_rule("eb_sampler", entropy_budget=gamma), batch, negate=True)
    for (c, m), g in zip(batch, got):
        assert g == ref_eb_sampler([-v for v in c], m, gamma)


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, min_size=1, max_size=4), st.sampled_from([0.0, 0.25, 0.45, 0.5, 1.0]))
def test_entropy_threshold_matches_reference(batch, threshold):
    got = _run(build_rule("entropy_threshold", max_entropy=threshold), batch, negate=True)
    for (c, m), g in zip(batch, got):
        assert g == ref_entropy_threshold([-v for v in c], m, threshold)


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, min_size=1, max_size=4), st.sampled_from([None, 0.0, 0.3, 0.4, 0.5]),
       st.sampled_from([None, 0.5, 0.8, 0.9]))
def test_hierarchy_matches_reference(batch, low, high):
    got = _run(build_rule("hierarchy", low_threshold=low, threshold=high), batch)
    for (c, m), g in zip(batch, got):
        assert g == ref_hierarchy(c, m, low, high)


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, min_size=1, max_size=4), st.sampled_from([(0.9, 0.75, 4), (0.8, 0.5, 1), (0.5, 0.5, 0)]))
def test_local_leap_matches_reference(batch, params):
    tau, relaxed, radius = params
    got = _run(build_rule("local_leap", threshold=tau, relaxed_threshold=relaxed, radius=radius), batch)
    for (c, m), g in zip(batch, got):
        assert g == ref_local_leap(c, m, tau, relaxed, radius)


def ref_credit_commit(conf: list[float], cand: list[bool], threshold: float) -> set[int]:
    """dInfer's threshold: every candidate >= min(best - 1e-5, threshold)."""
    best = max((conf[i] for i in range(len(conf)) if cand[i]), default=None)
    if best is None:
        return set()
    bar = max(min(best - 1e-5, threshold), -1000)
    return {i for i in range(len(conf)) if cand[i] and conf[i] >= bar}


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, min_size=1, max_size=4), st.sampled_from([0.5, 0.7, 0.9, 1.0]))
def test_credit_commit_matches_reference(batch, threshold):
    got = _run(build_rule("credit", threshold=threshold), batch)
    for (c, m), g in zip(batch, got):
        assert g == ref_credit_commit(c, m, threshold)


@settings(max_examples=100, deadline=None)
@given(st.lists(rows, min_size=1, max_size=4), st.sampled_from(NEW_RULES))
def test_adaptive_rules_commit_at_least_one_where_there_are_candidates(batch, name):
    rule = build_rule(name)
    got = _run(rule, batch, negate=rule.measure == "neg_entropy")
    for (_, m), g in zip(batch, got):
        assert (len(g) >= 1) == any(m)


# ---------------------------------------------------------------- combinations


@pytest.mark.parametrize("name", NEW_RULES)
def test_new_rules_are_adaptive_and_need_an_adaptive_schedule(name):
    rule = build_rule(name)
    assert rule.adaptive
    with pytest.raises(ValueError, match="is adaptive"):
        check_combination(build_policy("blocks", steps=24), rule, build_cache("none"), gen_length=24, block_length=8)


@pytest.mark.parametrize("name", ["eb_sampler", "entropy_threshold"])
def test_slowfast_refuses_a_rule_ranking_by_entropy(name):
    with pytest.raises(ValueError, match=r"slowfast.*ranks by 'neg_entropy'"):
        check_combination(build_policy("slowfast"), build_rule(name), build_cache("none"), gen_length=24,
                          block_length=8)


# ---------------------------------------------------------------- CreditDecoding's fusion


def ref_credit_fusion(logits_steps, masked_steps, alpha, gamma, beta):
    """dInfer's credit for one row and one block written plainly: a [L, V] matrix decayed every step after the
    first, the top-1 probability^gamma added at masked positions; fused logits per step."""
    L, V = logits_steps[0].shape
    mat = torch.zeros(L, V, dtype=torch.float32)
    out = []
    for step, (logits, masked) in enumerate(zip(logits_steps, masked_steps)):
        if step > 0:
            mat = mat * beta
        probs = torch.softmax(logits.to(torch.float32), dim=-1)
        for i in range(L):
            if masked[i]:
                top = int(probs[i].argmax())
                mat[i, top] += probs[i, top] ** gamma
        out.append(logits + alpha * torch.log(mat + 1))
    return out


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.sampled_from([(0.7, 0.2, 0.8), (2.0, 1.0, 0.5)]))
def test_credit_fusion_matches_reference(seed, block, params):
    alpha, gamma, beta = params
    g = torch.Generator().manual_seed(seed)
    V, G = 7, 2 * block
    rule = build_rule("credit", alpha=alpha, gamma=gamma, beta=beta)
    state = rule.init_state(1, G, block, torch.device("cpu"))
    for lo in (0, block):  # two blocks: the credit restarts in the second
        masked = torch.ones(block, dtype=torch.bool)
        logits_steps, masked_steps, fused_steps = [], [], []
        while masked.any():
            logits = torch.randn(block, V, generator=g) * 3
            pos = torch.nonzero(masked).flatten()
            fused = rule.fuse_logits(state, logits[pos], torch.zeros_like(pos), pos + lo, torch.tensor([lo]))
            logits_steps.append(logits)
            masked_steps.append(masked.clone())
            fused_steps.append((pos, fused))
            masked[pos[torch.randint(len(pos), (1,), generator=g)]] = False
        want = ref_credit_fusion(logits_steps, masked_steps, alpha, gamma, beta)
        for (pos, fused), ref in zip(fused_steps, want):
            torch.testing.assert_close(fused, ref[pos], rtol=1e-6, atol=1e-6)


def test_credit_fusion_runs_on_the_meta_device():
    rule = build_rule("credit")
    state = rule.init_state(2, 16, 8, torch.device("meta"))
    logits = torch.empty(5, 11, device="meta")
    idx = torch.empty(5, dtype=torch.long, device="meta")
    fused = rule.fuse_logits(state, logits, idx, idx, torch.empty(2, dtype=torch.long, device="meta"))
    assert fused.shape == (5, 11)


def test_credit_refuses_policies_without_blocks():
    with pytest.raises(ValueError, match="rule 'credit' keeps its credit per block of policy 'blocks'"):
        check_combination(build_policy("slowfast"), build_rule("credit"), build_cache("none"), gen_length=24,
                          block_length=8)
