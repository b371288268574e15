"""SlowFast sampling step by step on a scripted stand-in network."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.decoding import build_policy

from .scripted import MASK, ScriptedNetwork
from .spec_kwargs import spec_generate

P, G = 3, 8
LOW = 0.07  # a filler confidence below every threshold (still the top-1 of its position)


def run(script, trace=True, **policy):
    net = ScriptedNetwork(P, script)
    ids = torch.arange(P).unsqueeze(0)
    history = []
    orig_advance = type(policy_obj := build_policy("slowfast", **policy)).advance

    def spy(self, state, masked, active):
        finished = orig_advance(self, state, masked, active)
        history.append({k: getattr(state, k).clone() for k in ("span_start", "span_end", "fast", "explored", "determined")})
        return finished

    type(policy_obj).advance = spy
    try:
        out = spec_generate(net, ids, gen_length=G, block_length=G, policy=policy_obj, trace=trace)
    finally:
        type(policy_obj).advance = orig_advance
    return out, net, history


def committed_per_step(out):
    return [t.n_committed for t in out.records[0].trace]


def test_llada_slowfast_freeze_mean_fallback_and_fast_phase():
    script = [
        # cycle 1, explore (K=3): estimates 3, 4 -> std 0.5 < 1 -> frozen end 4
        [0.95, 0.5, 0.4, 0.2, LOW, LOW, LOW, LOW],
        [0, 0.5, 0.4, 0.35, LOW, LOW, LOW, LOW],
        [0, 0, 0.6, 0.4, LOW, LOW, LOW, LOW],
        # fast on [0, 4): position 3 left
        [0, 0, 0, 0.5, LOW, LOW, LOW, LOW],
        # cycle 2 from prev 4, explore: estimates 5, 8 (std 1.5), 5 (std 1.5) -> int(mean 6.5) = 6
        [0, 0, 0, 0, 0.2, 0.19, 0.18, 0.17],
        [0, 0, 0, 0, 0, 0.1, 0.9, 0.3],
        [0, 0, 0, 0, 0, 0.1, 0, 0.2],
        # fast on [4, 6): position 5 left
        [0, 0, 0, 0, 0, 0.3, 0, 0],
    ]
    out, net, hist = run(script, explore_steps=3, converge_threshold=0.3, stability_window=2, threshold=0.9)
    tokens = out.tokens[0].tolist()
    assert MASK not in tokens and tokens == [1 + j % 10 for j in range(G)]
    assert out.records[0].nfe == 8 and len(net.calls) == 8
    assert committed_per_step(out) == [1, 1, 1, 1, 1, 1, 1, 1]
    # step by step: (prev, end, fast, determined) after each advance
    seen = [(h["span_start"].item(), h["span_end"].item(), h["fast"].item(), h["determined"].item()) for h in hist]
    assert seen[0] == (0, 8, False, False)  # window not full yet: end untouched
    assert seen[1] == (0, 4, False, True)  # frozen at the last estimate
    assert seen[2] == (0, 4, True, True)  # K steps done -> fast phase on [0, 4)
    assert seen[3] == (4, 4, False, False)  # span full -> next sub-cycle explores from 4
    assert seen[5] == (4, 6, False, False)  # unstable window -> int(mean) but still exploring
    assert seen[6] == (4, 6, True, True)  # last exploration step decides
    # the mask token is never a prediction but stays in the softmax, so the scripted 0.6 is the confidence
    assert out.records[0].trace[2].sorted_confidences[0] == pytest.approx(0.6)


def test_fallback_to_mean_when_window_never_fills_and_explore_runs_k_forwards():
    # window 4 > K = 2: after K steps end = int(mean of the 2 estimates) = int((3 + 6) / 2) = 4
    script = [
        [0.95, 0.5, 0.4, LOW, LOW, LOW, LOW, LOW],
        [0, 0.45, 0.2, 0.2, 0.2, 0.4, LOW, LOW],
        [0, 0, 0.99, 0.99, LOW, LOW, LOW, LOW],  # fast: two >= threshold at once
        # next cycle from 4: everything very confident, exploration still takes K forwards
        [0, 0, 0, 0, 0.99, 0.99, 0.99, 0.99],
        [0, 0, 0, 0, 0, 0, 0, 0],
    ]
    out, net, hist = run(script, explore_steps=2, converge_threshold=0.3, stability_window=4, threshold=0.9)
    assert hist[1]["span_end"].item() == 4 and hist[1]["fast"].item()
    assert committed_per_step(out)[:4] == [1, 1, 2, 4]
    # block full after call 4, but the published explore phase still runs K = 2 forwards
    assert out.records[0].nfe == 5 and MASK not in out.tokens[0].tolist()


def test_dream_variant_zero_prefilled_window_round_mean_and_unbiased_variance():
    script = [
        [0.95, 0.5, 0.4, LOW, LOW, LOW, LOW, LOW],  # est 3: window [3, 0] var 4.5 -> round(1.5) = 2
        [0, 0.85, 0.85, 0.5, LOW, LOW, LOW, LOW],  # est 4: window [3, 4] var 0.5 <= 1 -> frozen 4
        [0, 0, 0, 0.2, LOW, LOW, LOW, LOW],
        [0, 0, 0, 0, 0.2, 0.2, 0.2, 0.2],
    ]
    out, _, hist = run(script, preset="dream", explore_steps=2)
    assert hist[0]["span_end"].item() == 2 and not hist[0]["determined"].item()
    assert hist[1]["span_end"].item() == 4 and hist[1]["determined"].item()
    assert committed_per_step(out)[:2] == [1, 2]  # explore parallel threshold 0.8 with >= 2 qualifying
    assert MASK not in out.tokens[0].tolist()


def test_truncated_fast_phase_reproduces_published_canvas_lengths():
    script = [
        [0.95, 0.5, 0.4, 0.2, LOW, LOW, LOW, LOW],
        [0, 0.5, 0.4, 0.35, LOW, LOW, LOW, LOW],  # frozen end 4
        [0, 0, 0.5, 0.4, LOW, LOW, LOW, LOW],
        [0, 0, 0, 0.5, LOW, LOW, LOW, LOW],
    ]
    out, net, _ = run(script, explore_steps=2, converge_threshold=0.3, truncate_fast=True, trace=False)
    lengths = [t for _, t in net.calls]
    assert lengths[:4] == [P + G, P + G, P + G, P + 4]  # first fast call full, then cut at the span end
    clean, net2, _ = run(script, explore_steps=2, converge_threshold=0.3, trace=False)
    assert all(t == P + G for _, t in net2.calls)
    assert torch.equal(clean.tokens, out.tokens)
