"""DPad suffix dropout (policy ``dpad``): equal to its published code, to a key-masked full canvas, and to the
plain block policy when nothing is dropped.

The goldens (``tests/fixtures/dpad_published.json``; how: its ``source`` field) hold, per setting and held-out
puzzle, a hash of the published answer ids and its NFE. By default the first puzzles of the settings that cover
every code path (published_goldens.covering_settings: each rule, loop, answer length, a full or narrow suffix window,
early termination on and off); ``-m exhaustive`` replays every setting on all of its puzzles.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, Sampling, build_cache, build_policy, generate
from dllm_bench.decoding.rules import build_rule
from dllm_bench.decoding.suffix_dropout import SuffixSampler, keep_probability
from dllm_bench.models import load_model

from .published_goldens import answer_hash, covering_settings
from .published_goldens import puzzle_prompts as _prompts
from .published_goldens import tiny_model as _model

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "dpad_published.json").read_text())
DEFAULT_PUZZLES = 4
LOOP_CACHE = {"generate": "none", "generate_with_prefix_cache": "prefix", "generate_with_dual_cache": "dual"}
DEFAULT_SETTINGS = covering_settings(GOLDEN["settings"], lambda s: {
    "rule": s["rule"], "loop": s["loop"], "gen_length": s["gen_length"],
    "window": "full" if s["suffix_window"] >= s["gen_length"] else "narrow", "ends early": s["early_termination"]})


def _spec(setting: dict) -> DecodeSpec:
    topk = setting["rule"] == "topk"
    policy = build_policy("dpad", steps=setting["gen_length"] if topk else None,
                          suffix_window=setting["suffix_window"], max_sd=setting["sigma"], scale=setting["scale"],
                          early_termination=setting["early_termination"])
    rule = build_rule("topk") if topk else build_rule("threshold", threshold=setting["tau"])
    return DecodeSpec(Decoding(setting["gen_length"], GOLDEN["block_length"], policy, rule,
                               build_cache(LOOP_CACHE[setting["loop"]])))


def _case(i: int, s: dict, full: bool):
    label = (f"{s['rule']}-{LOOP_CACHE[s['loop']]}-g{s['gen_length']}-w{s['suffix_window']}-k{s['sigma']}"
             f"-sc{s['scale']}-et{int(s['early_termination'])}")
    return pytest.param(i, full, id=label + ("-all" if full else ""), marks=[pytest.mark.exhaustive] if full else [])


@pytest.mark.threads(GOLDEN["threads"])
@pytest.mark.parametrize(("index", "full"), [_case(i, s, f) for i, s in enumerate(GOLDEN["settings"])
                                             for f in (False, True) if f or i in DEFAULT_SETTINGS])
def test_dpad_decodes_as_its_published_code(index, full):
    setting = GOLDEN["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    prompts = _prompts()
    with torch.no_grad():  # one batch, seed 0 in every row: each row draws what a batch-1 decode draws
        out = generate(_model(), torch.tensor([prompts[sid] for sid, _, _ in rows]), None, _spec(setting))
    got = [(answer_hash(out.tokens[b].tolist()), out.records[b].nfe) for b in range(len(rows))]
    assert got == [(digest, nfe) for _, digest, nfe in rows]


def test_early_termination_is_exercised_by_the_goldens():
    """At gen_length 32 the answer's EOS lies in block 3 of 4: DPad skips the last block."""
    ended = [s for s in GOLDEN["settings"] if s["gen_length"] == 32 and s["rule"] == "topk"]
    assert ended and all(nfe == 24 for s in ended for _, _, nfe in s["puzzles"])


def test_keep_probability_is_the_gaussian_over_the_window():
    p = keep_probability(5, 4.0, 2.0, 8, torch.device("cpu"))
    want = [2.0 * math.exp(-0.5 * (4.0 * d / 4) ** 2) / math.sqrt(2 * math.pi) for d in range(5)] + [0.0] * 3
    assert p.tolist() == pytest.approx(want, rel=1e-6)


def test_sampler_draws_once_per_block_from_the_row_generator():
    gen = torch.Generator().manual_seed(3)
    sampler = SuffixSampler(6, 4.0, 2.0, 12, [gen], torch.device("cpu"))
    sampler.update([0], [4])
    first = sampler.kept[0][1].clone()
    sampler.update([0], [4])  # same block: no new draw
    assert torch.equal(sampler.kept[0][1], first)
    u = torch.rand(8, generator=torch.Generator().manual_seed(3))
    p = keep_probability(6, 4.0, 2.0, 12, torch.device("cpu"))[:8]
    assert first.tolist() == [4 + d for d in range(8) if u[d] < p[d]]
    assert all(4 <= j < 10 for j in first.tolist())  # only inside the window


@pytest.mark.parametrize("cache_name", ["none", "prefix", "dual"])
def test_keeping_every_position_is_the_block_policy(tiny_llada_dir, cache_name):
    """A keep probability >= 1 everywhere drops nothing: tokens, NFE and forward positions of policy blocks."""
    model = load_model(tiny_llada_dir, device="cpu")
    ids = torch.randint(5, 60, (3, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding
    runs = {}
    for name, extra in (("blocks", {}), ("dpad", {"scale": 1e6, "early_termination": False})):
        spec = DecodeSpec(Decoding(16, 4, build_policy(name, steps=8, **extra), build_rule("topk"),
                                   build_cache(cache_name)))
        out = generate(model, ids, mask, spec)
        runs[name] = (out.tokens.tolist(), [(r.nfe, r.forward_positions) for r in out.records])
    assert runs["dpad"] == runs["blocks"]


def test_pruned_canvas_equals_a_key_masked_full_canvas(tiny_llada_dir):
    """The block's logits on the pruned canvas (kept suffix at its original positions) equal those of the full
    canvas whose dropped positions are never attended: an independent reference for the position ids."""
    model = load_model(tiny_llada_dir, device="cpu")
    P, G, hi = 6, 16, 4
    ids = torch.randint(5, 60, (2, P), generator=torch.Generator().manual_seed(1))
    x = torch.cat([ids, torch.full((2, G), model.config.mask_token_id)], dim=1)
    pad = torch.ones_like(x)
    pad[0, :1] = 0
    sampler = SuffixSampler(G, 4.0, 2.0, G, [torch.Generator().manual_seed(s) for s in (0, 5)], torch.device("cpu"))
    sampler.update([0, 1], [hi, hi])
    position_ids = (pad.cumsum(-1) - 1).clamp(min=0)
    canvas = sampler.canvas([0, 1], P, position_ids, pad)
    with torch.no_grad():
        pruned = model(x.gather(1, canvas.index), attention_mask=canvas.mask, position_ids=canvas.position_ids)
        seen = pad.clone()
        seen[:, P + hi:] = 0
        for b in range(2):
            seen[b, P + sampler.kept[b][1]] = 1
        full = model(x, attention_mask=seen, position_ids=position_ids)
    for b in range(2):
        assert torch.allclose(pruned[b, P: P + hi], full[b, P: P + hi], atol=1e-5)


@pytest.mark.parametrize(("params", "cache_name", "message"), [
    ({"suffix_window": 40}, "none", "dpad suffix_window 40 is longer than gen_length 24"),
    ({}, "dllm", "dpad runs without a cache or with prefix/dual"),
    ({"rng": "torch"}, "none", "dpad rng 'torch' is not one of row, global"),
    ({"max_sd": 0}, "none", "dpad max_sd must be a number > 0"),
])
def test_refusals_name_the_bad_value(params, cache_name, message):
    with pytest.raises(ValueError, match=message):
        DecodeSpec(Decoding(24, 8, build_policy("dpad", **params), build_rule("threshold"), build_cache(cache_name)))


def test_global_rng_draws_what_a_row_generator_with_the_same_seed_draws(tiny_llada_dir):
    """``rng=global`` takes torch's default generator (DPad's eval stream): seeded with s, a batch-1 decode equals
    ``rng=row`` with seed s; a second decode continues the stream instead of restarting it."""
    model = load_model(tiny_llada_dir, device="cpu")
    ids = torch.randint(5, 60, (1, 7), generator=torch.Generator().manual_seed(2))

    def run(rng: str, seed: int):
        spec = DecodeSpec(Decoding(16, 4, build_policy("dpad", steps=8, rng=rng, early_termination=False),
                                   build_rule("topk"), build_cache("none")), Sampling(seed=seed))
        out = generate(model, ids, None, spec)
        return out.tokens.tolist(), out.records[0].forward_positions

    torch.manual_seed(11)
    first = run("global", 0)
    second = run("global", 0)
    assert first == run("row", 11)
    torch.manual_seed(11)
    torch.rand(12)  # the first decode's draws: blocks 1-3 draw 12 + 8 + 4 numbers
    torch.rand(8)
    torch.rand(4)
    continued = torch.get_rng_state()
    torch.set_rng_state(continued)
    assert run("global", 0) == second  # the second decode drew from where the first left the stream
