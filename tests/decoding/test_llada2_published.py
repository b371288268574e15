"""LLaDA2.0 decoding (policy ``block_diffusion``, no K/V cache, ``steps`` per block): goldens recorded by running the
published ``generate`` (czg1225/DMax dFactory, and its copy in ZHZisZZ/dllm) and dllm's ``LLaDA2Sampler`` beside ours
on the trained tiny LLaDA2 checkpoint (``tests/fixtures/llada2_published.json``; how: its ``source`` field)."""

from __future__ import annotations

import json

import pytest
import torch

from dllm_bench.decoding import build_policy

from .machine_goldens import NEAR_TIE, decision_margin, same_machine
from .published_goldens import ROOT, answer_hash, puzzle_prompts, tiny_model, weights_sha256
from .spec_kwargs import spec_generate

FIXTURE = "llada2_published.json"
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / FIXTURE).read_text())
DEFAULT_PUZZLES = 4
DEFAULT_SETTINGS = (0, 4)  # generate's and the sampler's preset-like setting (threshold 0.95, steps = block)


def _label(setting: dict) -> str:
    return f"{setting['loop']}-t{setting['threshold']}-s{setting['steps']}-mtk{setting['minimal_topk']}"


def _cases():
    for i, setting in enumerate(GOLDEN["settings"]):
        if i in DEFAULT_SETTINGS:
            yield pytest.param(i, False, id=_label(setting))
        yield pytest.param(i, True, id=_label(setting) + "-all", marks=pytest.mark.exhaustive)


@pytest.fixture(scope="module")
def model():
    assert weights_sha256(ROOT / GOLDEN["checkpoint"]) == GOLDEN["weights_sha256"], "the tiny LLaDA2 weights changed: re-record the goldens"
    return tiny_model("llada2", torch.float32)


def policy_for(setting: dict, gen_length: int):
    """Ours for a published setting: ``steps`` capped at gen_length // minimal_topk as both loops cap it; generate
    ends after the block holding the first EOS, the sampler decodes every block."""
    return build_policy("block_diffusion", preset="llada2", threshold=setting["threshold"],
                        steps=min(setting["steps"], gen_length // setting["minimal_topk"]),
                        stop_after_block=setting["loop"] == "generate")


def cut_at_stop(tokens: list[int], stop: int, loop: str) -> list[int]:
    """The answer as the published loop returns it: generate's up to its first EOS, the sampler's whole."""
    return tokens[:tokens.index(stop) + 1] if loop == "generate" and stop in tokens else tokens


@pytest.mark.parametrize(("index", "full"), list(_cases()))
def test_llada2_decodes_as_the_published_loops(model, index, full):
    """Answer and forwards per puzzle, the batch decoded at once (the published loops run each alone). Off the
    recording machine only rows away from near-ties in their commit decisions are compared."""
    setting = GOLDEN["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    G, eos = GOLDEN["gen_length"], GOLDEN["eos_id"]
    prompts = puzzle_prompts("llada2")
    out = spec_generate(model, torch.tensor([prompts[sid] for sid, *_ in rows]), None, gen_length=G,
                        block_length=GOLDEN["block_length"], policy=policy_for(setting, G),
                        confidence_precision="float32", stop_token_ids=(eos,), trace=True)
    exact = same_machine(FIXTURE)
    compared = 0
    for b, (sid, digest, nfe) in enumerate(rows):
        if not exact and decision_margin(out.records[b].trace, setting["threshold"], probabilities=True) < NEAR_TIE:
            continue
        compared += 1
        got = answer_hash(cut_at_stop(out.tokens[b].tolist(), eos, setting["loop"]))
        assert (sid, got, out.records[b].nfe) == (sid, digest, nfe)
    assert compared >= len(rows) // 2


def test_the_goldens_exercise_the_stop_and_minimal_topk():
    """Puzzles in which generate ends before the last block (fewer forwards than the sampler's whole decode at the
    same setting), and a setting whose minimal_topk caps the steps."""
    by = {(s["loop"], s["threshold"], s["steps"], s["minimal_topk"]): s["puzzles"] for s in GOLDEN["settings"]}
    gen, samp = by[("generate", 0.95, 4, 1)], by[("sampler", 0.95, 4, 1)]
    assert any(g[2] < s[2] for g, s in zip(gen, samp, strict=True))
    assert {s["minimal_topk"] for s in GOLDEN["settings"]} > {1}  # minimal_topk caps the steps


def test_stop_after_block_must_be_a_bool():
    with pytest.raises(ValueError, match="stop_after_block"):
        build_policy("block_diffusion", stop_after_block="yes")
