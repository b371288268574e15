"""dKV-Cache-Decode decodes as its published code does, counts what it computes, and refuses what that code never
ran. Goldens: ``tests/fixtures/dkv_published.json`` (LLaDA) and ``dkv_dream_published.json`` (Dream; how they were
recorded: their ``source`` field), a hash of the published answer ids and the NFE per setting and held-out puzzle;
by default the first puzzles of the settings that cover every code path (published_goldens.covering_settings: one
block or several, fewer steps than tokens, a refresh every step, within a block or at/after its end; Dream: each
algorithm), one batch per setting; ``-m exhaustive`` replays every setting on all of its puzzles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import (
    Accounting,
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    build_rule,
    check_combination,
    generate,
)

from .conftest import prompts_for
from .published_goldens import answer_hash, covering_settings
from .published_goldens import puzzle_prompts as _prompts
from .published_goldens import tiny_model as _model

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "dkv_published.json").read_text())
DREAM_GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "dkv_dream_published.json").read_text())
DEFAULT_PUZZLES = 4
DREAM_DEFAULT_PUZZLES = 4


def _refresh(every: int, block: int) -> str:
    return "every step" if every == 1 else "within a block" if every < block else "at or after a block's end"


DEFAULT_SETTINGS = covering_settings(GOLDEN["settings"], lambda s: {
    "block": s["block_length"], "steps": s["steps"], "refresh": _refresh(s["refresh_every"], s["block_length"])})
DREAM_DEFAULT_SETTINGS = covering_settings(DREAM_GOLDEN["settings"], lambda s: {"alg": s["alg"]})


def _spec(setting: dict, gen_length: int) -> DecodeSpec:
    return DecodeSpec(Decoding(gen_length, setting["block_length"], build_policy("blocks", steps=setting["steps"]),
                               build_rule("topk"), build_cache("dkv", refresh_every=setting["refresh_every"])))


def _case(i: int, setting: dict, full: bool):
    label = f"b{setting['block_length']}-s{setting['steps']}-n{setting['refresh_every']}"
    return pytest.param(i, full, id=label + ("-all" if full else ""),
                        marks=[pytest.mark.exhaustive] if full else [pytest.mark.slow])


@pytest.mark.parametrize("index,full", [_case(i, s, f) for i, s in enumerate(GOLDEN["settings"]) for f in (False, True)
                                        if f or i in DEFAULT_SETTINGS])
def test_tiny_llada_decodes_as_the_published_code(index, full):
    setting = GOLDEN["settings"][index]
    cases = setting["cases"] if full else setting["cases"][:DEFAULT_PUZZLES]
    batch = torch.tensor([_prompts()[c["sample_id"]] for c in cases])  # one prompt length: no padding
    with torch.no_grad():
        out = generate(_model(), batch, None, _spec(setting, GOLDEN["gen_length"]))
    got = [(answer_hash(out.tokens[b].tolist()), out.records[b].nfe) for b in range(len(cases))]
    assert got == [(c["answer_hash"], c["nfe"]) for c in cases]


def _dream_case(i: int, setting: dict, full: bool):
    label = f"s{setting['steps']}-{setting['alg']}-n{setting['refresh_every']}"
    return pytest.param(i, full, id=label + ("-all" if full else ""), marks=[pytest.mark.exhaustive] if full else [])


@pytest.mark.threads(DREAM_GOLDEN["threads"])
@pytest.mark.parametrize("index,full", [_dream_case(i, s, f) for i, s in enumerate(DREAM_GOLDEN["settings"])
                                        for f in (False, True) if f or i in DREAM_DEFAULT_SETTINGS])
def test_tiny_dream_decodes_as_the_published_code(index, full):
    """Dream's loop (``diffusion_generate``, cache_type 'decoded'): the published softmax is float32, so the
    confidence is taken in the logits' dtype."""
    setting = DREAM_GOLDEN["settings"][index]
    cases = setting["cases"] if full else setting["cases"][:DREAM_DEFAULT_PUZZLES]
    G = DREAM_GOLDEN["gen_length"]
    spec = DecodeSpec(Decoding(G, G, build_policy("dream", steps=setting["steps"], alg=setting["alg"]), None,
                               build_cache("dkv", refresh_every=setting["refresh_every"])),
                      Sampling(confidence_precision="model"))
    batch = torch.tensor([_prompts("dream")[c["sample_id"]] for c in cases])
    with torch.no_grad():
        out = generate(_model("dream"), batch, None, spec)
    got = [(answer_hash(out.tokens[b].tolist()), out.records[b].nfe) for b in range(len(cases))]
    assert got == [(c["answer_hash"], c["nfe"]) for c in cases]


def test_dream_forward_positions_count_the_queries(dream):
    """Dream, refresh_every 4: steps 0 and 4 run the canvas (P + G); step 1 runs position P - 1 and every answer
    position (the canvas's last included); any other step i runs the position before each answer position masked at
    the start of step i - 1."""
    P, G = 6, 8
    prompts = torch.tensor(prompts_for(dream, lengths=(P,), seed=4))
    spec = DecodeSpec(Decoding(G, G, build_policy("dream", steps=G), None, build_cache("dkv", refresh_every=4)),
                      accounting=Accounting(trace=True))
    with torch.no_grad():
        out = generate(dream, prompts, None, spec)
    committed = [t.n_committed for t in out.records[0].trace]
    masked = [G - sum(committed[:i]) for i in range(G)]  # at the start of step i
    expected = sum(P + G if i % 4 == 0 else G + 1 if i == 1 else masked[i - 1] for i in range(G))
    assert out.records[0].nfe == G and out.records[0].forward_positions == expected


def test_refresh_every_one_is_the_uncached_decode(llada):
    prompts = torch.tensor(prompts_for(llada, lengths=(7, 7, 7), seed=3))
    specs = [DecodeSpec(Decoding(16, 8, build_policy("blocks", steps=16), build_rule("topk"), cache))
             for cache in (build_cache("none"), build_cache("dkv", refresh_every=1))]
    with torch.no_grad():
        plain, dkv = (generate(llada, prompts, None, s) for s in specs)
    assert torch.equal(plain.tokens, dkv.tokens)
    assert [r.forward_positions for r in plain.records] == [r.forward_positions for r in dkv.records]


def test_forward_positions_count_the_queries(llada):
    """Block of 8 in 8 steps, 1 commit a step, refresh_every 4: steps 0, 1, 4 run the canvas (P + G); step i of
    2, 3, 5, 6, 7 runs the answer positions masked before step i - 1 (G - (i - 1), the next blocks included)."""
    P, G = 6, 16
    prompts = torch.tensor(prompts_for(llada, lengths=(P,), seed=4))
    spec = DecodeSpec(Decoding(G, 8, build_policy("blocks", steps=16), build_rule("topk"),
                               build_cache("dkv", refresh_every=4)))
    with torch.no_grad():
        out = generate(llada, prompts, None, spec)
    per_block = [P + G if i in (0, 1, 4) else None for i in range(8)]
    expected = 0
    for block in range(2):
        for i, full in enumerate(per_block):
            expected += full if full else G - (block * 8 + i - 1)
    assert out.records[0].forward_positions == expected and out.records[0].nfe == 16


def test_batched_rows_that_part_decode_as_alone(llada):
    """Rows of one batch that fall out of lockstep (one finishes early) decode as they do alone."""
    prompts = prompts_for(llada, lengths=(7, 7), seed=5)
    spec = DecodeSpec(Decoding(16, 8, build_policy("blocks", steps=8), build_rule("topk"),
                               build_cache("dkv", refresh_every=2), early_stop=True))
    with torch.no_grad():
        both = generate(llada, torch.tensor(prompts), None, spec)
        for b, prompt in enumerate(prompts):
            alone = generate(llada, torch.tensor([prompt]), None, spec)
            assert alone.tokens[0].tolist() == both.tokens[b].tolist()
            assert alone.records[0].nfe == both.records[b].nfe


@pytest.mark.parametrize("policy,rule,match", [
    (("blocks", {}), ("threshold", {}), r"^cache 'dkv' runs as published only with policy 'blocks' \(steps\)"),
    (("slowfast", {}), None, r"^cache 'dkv' runs as published only with"),
    (("blocks", {"steps": 16}), ("topk", {"remasking": "entropy"}), r"^cache 'dkv' runs with topk remasking"),
])
def test_combinations_the_published_loop_never_ran_are_refused(policy, rule, match):
    with pytest.raises(ValueError, match=match):
        check_combination(build_policy(policy[0], **policy[1]), build_rule(rule[0], **rule[1]) if rule else None,
                          build_cache("dkv"), gen_length=16, block_length=8)


def test_cfg_and_the_other_flavours_loop_are_refused(dream, llada):
    with pytest.raises(ValueError, match="classifier-free guidance runs only without a cache"):
        check_combination(build_policy("blocks", steps=16), build_rule("topk"), build_cache("dkv"),
                          gen_length=16, block_length=8, cfg_scale=1.0)
    spec = DecodeSpec(Decoding(16, 8, build_policy("blocks", steps=16), build_rule("topk"), build_cache("dkv")))
    with pytest.raises(ValueError, match=r"^cache 'dkv' runs on dream models with policy 'dream' \(the published "
                                         r"dream loop\), got policy 'blocks'$"):
        generate(dream, torch.tensor([[1, 2, 3]]), None, spec)
    spec = DecodeSpec(Decoding(16, 16, build_policy("dream", steps=16), None, build_cache("dkv")))
    with pytest.raises(ValueError, match=r"^cache 'dkv' runs on llada models with policy 'blocks'"):
        generate(llada, torch.tensor([[1, 2, 3]]), None, spec)
