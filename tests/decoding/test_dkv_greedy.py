"""dKV-Cache-Greedy (``cache=dkv_greedy``, ``rule=random_order``) decodes as its published code does, counts what that
code computes, and refuses what it never ran. Goldens: ``tests/fixtures/dkv_greedy_published.json`` (how they were
recorded: its ``source``), a hash of the published answer ids and the NFE per setting and held-out puzzle, each
decoded alone; by default the first puzzles of the settings that cover every code path (published_goldens.
covering_settings: one block or several, fewer steps than tokens, the cache off or on with a refresh every step or
every n and a window or none, each seed), ``-m exhaustive`` every setting on all of its puzzles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.decoding import (
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    build_rule,
    check_combination,
    generate,
)
from dllm_bench.decoding.caches.dkv_greedy import window_neighbours

from .published_goldens import answer_hash, covering_settings
from .published_goldens import puzzle_prompts as _prompts
from .published_goldens import tiny_model as _model

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "dkv_greedy_published.json").read_text())
DEFAULT_PUZZLES = 1
DEFAULT_SETTINGS = covering_settings(GOLDEN["settings"], lambda s: {
    "block": s["block_length"], "steps": s["steps"], "seed": s["seed"], "cache": "off" if not s["enable_cache"] else
    f"refresh {'every step' if s['refresh_every'] == 1 else 'every n'}, {'a' if s['window'] else 'no'} window"})


def _spec(setting: dict, gen_length: int) -> DecodeSpec:
    cache = (build_cache("dkv_greedy", refresh_every=setting["refresh_every"], window=setting["window"])
             if setting["enable_cache"] else build_cache("none"))
    return DecodeSpec(Decoding(gen_length, setting["block_length"], build_policy("blocks", steps=setting["steps"]),
                               build_rule("random_order"), cache), Sampling(seed=setting["seed"]))


def _case(i: int, setting: dict, full: bool):
    label = (f"b{setting['block_length']}-s{setting['steps']}-"
             + (f"n{setting['refresh_every']}-w{setting['window']}" if setting["enable_cache"] else "nocache")
             + f"-seed{setting['seed']}")
    return pytest.param(i, full, id=label + ("-all" if full else ""), marks=[pytest.mark.exhaustive] if full else [])


@pytest.mark.parametrize("index,full", [_case(i, s, f) for i, s in enumerate(GOLDEN["settings"]) for f in (False, True)
                                        if f or i in DEFAULT_SETTINGS])
def test_tiny_llada_decodes_as_the_published_code(index, full):
    """Each puzzle alone, as recorded (the published order draw is ``torch.rand((B, L))`` over the whole batch)."""
    setting = GOLDEN["settings"][index]
    cases = setting["cases"] if full else setting["cases"][:DEFAULT_PUZZLES]
    spec = _spec(setting, GOLDEN["gen_length"])
    got, want = [], []
    with torch.no_grad():
        for c in cases:
            out = generate(_model(), torch.tensor([_prompts()[c["sample_id"]]]), None, spec)
            got.append((answer_hash(out.tokens[0].tolist()), out.records[0].nfe,
                        out.records[0].forward_positions if "forward_positions" in c else None))
            want.append((c["answer_hash"], c["nfe"], c.get("forward_positions")))
    assert got == want


def test_rows_of_a_batch_decode_as_alone_with_their_own_seeds():
    """Per-row generators: a row's order is its own draw (the published batch draws one [B, L] tensor instead)."""
    setting = GOLDEN["settings"][0]
    ids = [c["sample_id"] for c in setting["cases"][:3]]
    seeds = [0, 1, 5]
    spec = _spec(setting, GOLDEN["gen_length"])
    with torch.no_grad():
        batch = generate(_model(), torch.tensor([_prompts()[i] for i in ids]), None, spec.for_batch(seeds))
        for b, (sid, seed) in enumerate(zip(ids, seeds)):
            alone = generate(_model(), torch.tensor([_prompts()[sid]]), None, spec.for_batch([seed]))
            assert torch.equal(batch.tokens[b], alone.tokens[0])
            assert batch.records[b].forward_positions == alone.records[0].forward_positions


def test_a_left_padded_row_draws_over_its_own_canvas():
    """The draw covers a row's real prompt and answer: left padding in a batch does not shift its order."""
    setting = GOLDEN["settings"][0]
    sid = setting["cases"][0]["sample_id"]
    prompt = _prompts()[sid]
    pad = _model().config.pad_token_id
    padded = torch.tensor([[pad] * 3 + prompt])
    mask = torch.tensor([[0] * 3 + [1] * len(prompt)])
    with torch.no_grad():
        out = generate(_model(), padded, mask, _spec(setting, GOLDEN["gen_length"]))
    assert answer_hash(out.tokens[0].tolist()) == setting["cases"][0]["answer_hash"]


def test_refresh_every_step_is_the_uncached_decode():
    prompts = torch.tensor([_prompts()[c["sample_id"]] for c in GOLDEN["settings"][0]["cases"][:3]])
    specs = [DecodeSpec(Decoding(24, 8, build_policy("blocks", steps=24), build_rule("random_order"), cache))
             for cache in (build_cache("none"), build_cache("dkv_greedy", refresh_every=1))]
    with torch.no_grad():
        plain, greedy = (generate(_model(), prompts, None, s) for s in specs)
    assert torch.equal(plain.tokens, greedy.tokens)
    assert [r.forward_positions for r in plain.records] == [r.forward_positions for r in greedy.records]


def _walk(order: list[float], taken: list[bool], masked: list[bool], window: int) -> list[bool]:
    """The window as a plain walk: commits by descending score (ties by position), each looking at s-1, s+1, s-2,
    s+2, ... and taking masked, untaken positions until it has ``window``."""
    taken = list(taken)
    G = len(order)
    commits = sorted((p for p in range(G) if order[p] != float("-inf")), key=lambda p: (-order[p], p))
    for s in commits:
        got = 0
        for d in range(1, G):
            for p in (s - d, s + d):
                if got < window and 0 <= p < G and masked[p] and not taken[p]:
                    taken[p] = True
                    got += 1
    return taken


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 20).flatmap(lambda G: st.tuples(
    st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=G, max_size=G),
    st.lists(st.booleans(), min_size=G, max_size=G),
    st.lists(st.booleans(), min_size=G, max_size=G),
    st.integers(0, 5))))
def test_window_is_the_published_walk(case):
    scores, previous, masked, window = case
    order = [float("-inf") if s is None else float(s) for s in scores]
    commits = [s is not None for s in scores]
    taken = [c or p for c, p in zip(commits, previous)]
    want = _walk(order, taken, masked, window)
    got = window_neighbours(torch.tensor([order]), torch.tensor([taken]), torch.tensor([masked]), window,
                            sum(commits))
    assert got[0].tolist() == want


@pytest.mark.parametrize("policy,rule,cache,message", [
    (("blocks", {"steps": 24}), ("topk", {}), ("dkv_greedy", {}),
     r"^cache 'dkv_greedy' runs as published only with policy 'blocks' \(steps\) and rule 'random_order'"),
    (("blocks", {}), ("random_order", {}), ("none", {}), r"^rule 'random_order' .* needs policy 'blocks' with steps"),
    (("blocks", {"steps": 24}), ("random_order", {}), ("dkv", {}), r"^cache 'dkv' runs as published only with"),
])
def test_refusals_name_the_value(policy, rule, cache, message):
    with pytest.raises(ValueError, match=message):
        check_combination(build_policy(policy[0], **policy[1]), build_rule(rule[0], **rule[1]),
                          build_cache(cache[0], **cache[1]), gen_length=24, block_length=8)


def test_parameter_refusals_and_flavour():
    with pytest.raises(ValueError, match=r"^dkv_greedy window must be >= 0 .* got -1"):
        build_cache("dkv_greedy", window=-1)
    with pytest.raises(ValueError, match=r"^dkv_greedy refresh_every must be >= 1 .* got 0"):
        build_cache("dkv_greedy", refresh_every=0)
    with pytest.raises(ValueError, match=r"^cache 'dkv_greedy' runs on llada models only, got a 'dream' model"):
        build_cache("dkv_greedy").check_flavour("dream", "blocks")
