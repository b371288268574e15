"""LLaDA2.1 editing (policy ``llada21``): goldens recorded by running ZHZisZZ/dllm's ``LLaDA21Sampler`` and SGLang's
``JointThreshold`` beside ours on the trained tiny LLaDA2 checkpoint (``tests/fixtures/llada21_published.json``; how:
its ``source`` field), the SGLang loop's post-step cap against a reference written here on a random checkpoint,
accounting, bf16 and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, Sampling, build_cache, build_policy
from dllm_bench.decoding.config import build_rule
from dllm_bench.models import load_model
from dllm_bench.models.tiny_blocks import make_random_block_checkpoint

from .conftest import prompts_for
from .machine_goldens import NEAR_TIE, decision_margin, same_machine
from .published_goldens import PUZZLES, ROOT, answer_hash, puzzle_prompts, tiny_model, weights_sha256
from .spec_kwargs import spec_generate

FIXTURE = "llada21_published.json"
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / FIXTURE).read_text())
DEFAULT_PUZZLES = 2
DEFAULT_SETTINGS = (1,)  # the dllm preset ending after the EOS block (the SGLang loop: _sglang_reference)


@pytest.fixture(scope="module")
def trained():
    assert weights_sha256(ROOT / GOLDEN["checkpoint"]) == GOLDEN["weights_sha256"], "the tiny LLaDA2 weights changed: re-record the goldens"
    return tiny_model("llada2", torch.float32)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A random LLaDA2 checkpoint whose top-1 probabilities spread over (0, 1) (init std 4.0), for the loop checks."""
    return make_random_block_checkpoint(tmp_path_factory.mktemp("llada21") / "llada2", "llada2", seed=0, init_std=4.0)


def _prompts(model) -> dict[str, list[int]]:
    """The first 8 ids of each puzzle's text (two blocks of 4) under the random checkpoint's tokenizer."""
    rows = [json.loads(line) for line in PUZZLES.read_text().splitlines()]
    return {r["sample_id"]: model.tokenizer.encode(r["puzzle"], add_special_tokens=False)[:8] for r in rows}


def _policy(setting: dict):
    return build_policy("llada21", threshold=setting["threshold"], edit_threshold=setting["edit_threshold"],
                        max_post_steps=setting["max_post_steps"], min_commit=setting["min_commit"],
                        loop=setting["loop"], stop_after_block=setting["stop"])


def _label(setting: dict) -> str:
    return (f"{setting['loop']}-t{setting['threshold']}-e{setting['edit_threshold']}-post{setting['max_post_steps']}"
            f"-k{setting['min_commit']}" + ("-stop" if setting["stop"] else ""))


def _cases():
    for i, setting in enumerate(GOLDEN["settings"]):
        if i in DEFAULT_SETTINGS:
            yield pytest.param(i, False, id=_label(setting))
        yield pytest.param(i, True, id=_label(setting) + "-all", marks=pytest.mark.exhaustive)


def blocks_run(tokens: list[int], offset: int, block_length: int, stop: int | None) -> int:
    """Grid blocks a decode ran: up to the block of its first ``stop`` (None: every block of the answer)."""
    last = tokens.index(stop) if stop is not None and stop in tokens else len(tokens) - 1
    return (offset + last) // block_length + 1


@pytest.mark.parametrize(("index", "full"), list(_cases()))
def test_llada21_decodes_as_the_published_loops(trained, index, full):
    """Answer, forwards and edits per puzzle, the batch decoded at once (the published loops run each alone); the
    SGLang loop runs one more forward per block (it persists the block's KV; we keep none: docs/differences.md).
    Off the recording machine only rows away from near-ties in their commit decisions are compared."""
    setting = GOLDEN["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    G, L, eos = GOLDEN["gen_length"], GOLDEN["block_length"], GOLDEN["eos_id"]
    prompts = [puzzle_prompts("llada2")[sid] for sid, *_ in rows]
    out = spec_generate(trained, torch.tensor(prompts), None, gen_length=G, block_length=L, policy=_policy(setting),
                        confidence_precision="float32", stop_token_ids=(eos,), trace=True)
    exact = same_machine(FIXTURE)
    compared = 0
    for b, (sid, digest, nfe, edits, blocks) in enumerate(rows):
        if not exact and decision_margin(out.records[b].trace, setting["threshold"], probabilities=True) < NEAR_TIE:
            continue
        compared += 1
        tokens = out.tokens[b].tolist()
        stop = eos if setting["stop"] else None
        if stop is not None and stop in tokens:
            tokens = tokens[:tokens.index(stop) + 1]
        kv_forwards = blocks_run(tokens, len(prompts[b]) % L, L, stop) if setting["loop"] == "sglang" else 0
        assert kv_forwards == blocks
        got = (answer_hash(tokens), out.records[b].nfe + kv_forwards, out.records[b].edits)
        assert (sid, *got) == (sid, digest, nfe, edits)
    assert compared >= len(rows) // 2


def test_the_goldens_exercise_edits_the_post_step_cap_and_the_stop():
    """Every setting rewrites committed tokens in some puzzle; some decode runs into its post-step cap (more
    forwards than the answer's masks and one settling step per block need, the SGLang loop's KV forwards
    aside); both loops run with and without the stop after the EOS block, and nearly every decode is kept."""
    G, L = GOLDEN["gen_length"], GOLDEN["block_length"]
    offset = len(next(iter(puzzle_prompts("llada2").values()))) % L
    settle = G + blocks_run([0] * G, offset, L, None)  # each mask its own step, then one post step per block
    for setting in GOLDEN["settings"]:
        assert max(edits for *_, edits, _ in setting["puzzles"]) > 0
        assert len(setting["puzzles"]) >= 100 - 5
    assert any(nfe - blocks > settle for s in GOLDEN["settings"] for _, _, nfe, _, blocks in s["puzzles"])
    assert {(s["loop"], s["stop"]) for s in GOLDEN["settings"]} == {(a, b) for a in ("dllm", "sglang")
                                                                    for b in (False, True)}


def test_early_stop_waits_for_the_block_to_settle(trained):
    """With edits a committed stop token may still be rewritten until its block ends: ``early_stop`` on the EOS
    alone ends a row exactly where ``stop_after_block`` does (same answer, same forwards)."""
    eos = GOLDEN["eos_id"]
    prompts = torch.tensor(list(puzzle_prompts("llada2").values())[:2])
    runs = [spec_generate(trained, prompts, None, gen_length=GOLDEN["gen_length"], block_length=GOLDEN["block_length"],
                          policy=build_policy("llada21", preset="dllm", stop_after_block=after), early_stop=not after,
                          confidence_precision="float32", stop_token_ids=(eos,)) for after in (False, True)]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert [r.nfe for r in runs[0].records] == [r.nfe for r in runs[1].records]
    whole = [row[2] for row in GOLDEN["settings"][0]["puzzles"][:2]]  # the same preset decoding every block
    assert any(r.nfe < n for r, n in zip(runs[0].records, whole, strict=True))


def _sglang_reference(model, prompt: list[int], G: int, L: int, threshold: float, edit: float, cap: int
                      ) -> tuple[list[int], int, int]:
    """One row as SGLang's JointThreshold steps a block (per block: forward, then mask-to-token above threshold or
    the top one, token-to-token edits above ``edit``; a step with no mask adds a post step, past ``cap`` the block
    ends with that forward applying nothing; a step that changes nothing ends the block): ids, forwards, edits."""
    mask_id = model.config.mask_token_id
    P = len(prompt)
    x = torch.tensor([prompt + [mask_id] * G])
    nfe = edits = 0
    for lo in range(P, P + G, L):
        post = 0
        while True:
            with torch.no_grad():
                logits = model(x)[0, lo:lo + L].float()
            nfe += 1
            probs = torch.softmax(logits, dim=-1)
            choice = logits.clone()
            choice[:, mask_id] = float("-inf")
            x0 = choice.argmax(dim=-1)
            p = probs.gather(1, x0[:, None])[:, 0]
            block = x[0, lo:lo + L]
            masked = block == mask_id
            if masked.any():
                conf = torch.where(masked, p, float("-inf"))
                commit = conf > threshold
                if not commit.any():
                    commit[int(conf.argmax())] = True
            else:
                post += 1
                if post > cap:
                    break
                commit = torch.zeros_like(masked)
            change = ~masked & (p > edit) & (x0 != block)
            if not (commit | change).any():
                break
            edits += int(change.sum())
            x[0, lo:lo + L] = torch.where(commit | change, x0, block)
    return x[0, P:].tolist(), nfe, edits


@pytest.mark.parametrize(("threshold", "edit", "cap"), [(0.5, 0.0, 16), (0.5, 0.0, 2), (0.8, 0.4, 3)])
def test_sglang_loop_steps_as_the_reference(checkpoint, threshold, edit, cap):
    model = load_model(checkpoint, device="cpu")
    prompts = [p[:8] for p in list(_prompts(model).values())[:4]]
    policy = build_policy("llada21", threshold=threshold, edit_threshold=edit, max_post_steps=cap, loop="sglang")
    out = spec_generate(model, torch.tensor(prompts), None, gen_length=12, block_length=4, policy=policy,
                        confidence_precision="float32")
    for b, prompt in enumerate(prompts):
        want = _sglang_reference(model, prompt, 12, 4, threshold, edit, cap)
        assert (out.tokens[b].tolist(), out.records[b].nfe, out.records[b].edits) == want


def test_edits_are_counted_per_step_and_sample_on_the_tiny_llada():
    """The committed tiny LLaDA (full attention), float32 and bf16: every answer position committed, the per-step
    edit counts add up to the sample's."""
    from .published_goldens import tiny_model

    for dtype in (torch.float32, torch.bfloat16):
        model = tiny_model("llada", dtype)
        prompts = prompts_for(model, (10, 10), seed=2)
        out = spec_generate(model, torch.tensor(prompts), None, gen_length=16, block_length=8,
                            policy=build_policy("llada21", threshold=0.7, edit_threshold=0.5),
                            confidence_precision="float32", trace=True)
        assert (out.tokens != model.config.mask_token_id).all()
        for rec in out.records:
            assert sum(t.n_edited for t in rec.trace) == rec.edits


def test_an_adaptive_rule_commits_the_masks(checkpoint):
    model = load_model(checkpoint, device="cpu")
    out = spec_generate(model, torch.tensor(prompts_for(model, (8,), seed=4)), None, gen_length=8, block_length=4,
                        policy=build_policy("llada21"), rule=build_rule("threshold", threshold=0.3),
                        confidence_precision="float32")
    assert (out.tokens != model.config.mask_token_id).all()


@pytest.mark.parametrize(("cache", "rule", "needle"), [
    ("prefix", None, "keep no cache"),
    ("none", "topk", "fixed-count rule"),
    ("none", "entropy_threshold", "other units"),
])
def test_refused_combinations(cache, rule, needle):
    with pytest.raises(ValueError, match=needle):
        DecodeSpec(Decoding(16, 8, build_policy("llada21"), build_rule(rule) if rule else None, build_cache(cache)),
                   Sampling())


@pytest.mark.parametrize(("params", "needle"), [({"threshold": 1.5}, "threshold must be"),
                                                ({"stop_after_block": 1}, "stop_after_block"),
                                                ({"max_post_steps": -1}, "max_post_steps"),
                                                ({"min_commit": 0}, "min_commit"),
                                                ({"loop": "vllm"}, "loop must be"),
                                                ({"tau": 0.5}, "unknown")])
def test_bad_parameters_are_refused(params, needle):
    with pytest.raises(ValueError, match=needle):
        build_policy("llada21", **params)
