"""DMax soft parallel decoding (policy ``dmax``): goldens recorded by running the published dInfer loop
(czg1225/DMax 82bc29e, ``BlockDiffusionLLM`` uniform path) beside ours on the trained tiny LLaDA2
(``tests/fixtures/dmax_published.json``; how: its ``source`` field), a reference loop written here for the
``settle`` parameter the published code fixes at 0.9, batch against rows alone, the soft input's construction,
bf16, accounting and refusals."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, Sampling, build_cache, build_policy
from dllm_bench.decoding.config import build_rule
from dllm_bench.models.tiny_blocks import make_random_block_checkpoint

from .conftest import prompts_for
from .machine_goldens import NEAR_TIE, decision_margin, same_machine
from .published_goldens import answer_hash, covering_settings, puzzle_prompts, tiny_model
from .spec_kwargs import spec_generate

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = "dmax_published.json"
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / FIXTURE).read_text())
DEFAULT_PUZZLES = 4
# the default selection: a setting with the published early stop and one without
DEFAULT_SETTINGS = covering_settings(GOLDEN["settings"], lambda s: {"early_stop": s["early_stop"]})


def _case(i: int, setting: dict, full: bool):
    label = f"t{setting['threshold']}-L{setting['block_length']}-{'eos' if setting['early_stop'] else 'all'}"
    return pytest.param(i, full, id=label + ("-every" if full else ""), marks=[pytest.mark.exhaustive] if full else [])


@pytest.mark.parametrize(("index", "full"), [_case(i, s, f) for i, s in enumerate(GOLDEN["settings"])
                                             for f in (False, True) if f or i in DEFAULT_SETTINGS])
def test_dmax_decodes_as_the_published_loop(index, full):
    """Answer, forwards (the published K/V prefill included: ``prefill``) and edits per puzzle, the batch decoded
    at once (the published loop runs each alone). Off the recording machine only rows away from near-ties in their
    commit decisions are compared."""
    setting = GOLDEN["settings"][index]
    path = ROOT / "dllm_bench" / "tiny" / "checkpoints" / GOLDEN["model"] / "model.safetensors"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == GOLDEN["weights_sha256"], (
        f"the {GOLDEN['model']} weights changed: re-record {FIXTURE}")
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    model, prompts = tiny_model(GOLDEN["model"].removeprefix("tiny_")), puzzle_prompts("llada2")
    policy = build_policy("dmax", threshold=setting["threshold"], prefill=True, eos_stop=setting["early_stop"])
    out = spec_generate(model, torch.tensor([prompts[sid] for sid, *_ in rows]), None,
                        gen_length=GOLDEN["gen_length"], block_length=setting["block_length"], policy=policy,
                        confidence_precision="float32", trace=True)
    exact = same_machine(FIXTURE)
    compared = 0
    for b, (sid, digest, nfe, edits) in enumerate(rows):
        if not exact and decision_margin(out.records[b].trace, setting["threshold"], probabilities=True) < NEAR_TIE:
            continue
        compared += 1
        got = (answer_hash(out.tokens[b].tolist()), out.records[b].nfe, out.records[b].edits)
        assert (sid, *got) == (sid, digest, nfe, edits)
    assert compared >= len(rows) // 2


def test_the_goldens_exercise_edits_and_early_stop():
    """Every setting rewrites decoded tokens in some puzzle and holds 100 puzzles (decoded or listed as skipped);
    the early-stop settings end some decodes with fewer forwards than the same threshold without it."""
    by = {(s["threshold"], s["early_stop"]): s for s in GOLDEN["settings"]}
    for s in GOLDEN["settings"]:
        assert max(edits for *_, edits in s["puzzles"]) > 0
        assert len(s["puzzles"]) + len(s["skipped"]) == 100
    for (threshold, stop), s in by.items():
        if stop and (threshold, False) in by:
            full = {sid: nfe for sid, _, nfe, _ in by[threshold, False]["puzzles"]}
            assert any(nfe < full[sid] for sid, _, nfe, _ in s["puzzles"] if sid in full)


@pytest.fixture(scope="module")
def llada2(tmp_path_factory):
    from dllm_bench.models import load_model

    # init 4.0: random weights with top-1 probabilities spread over (0, 1), so that commits and settling vary
    path = make_random_block_checkpoint(tmp_path_factory.mktemp("dmax") / "llada2", "llada2", seed=0, init_std=4.0)
    return load_model(path, device="cpu")


def _soft(model, token: int, p: torch.Tensor, mask_id: int) -> torch.Tensor:
    """The published mix at one position: p (a float32 scalar tensor) of the token's embedding, the rest the mask's."""
    e, m = model.embed.weight[token], model.embed.weight[mask_id]
    mix = e * p + m * (1 - p)
    target = e.norm() * p + m.norm() * (1 - p)
    return (mix * (target / (mix.norm() + 1e-6))).to(e.dtype)


def _reference(model, prompt: list[int], G: int, L: int, threshold: float, settle: float
               ) -> tuple[list[int], int, int]:
    """One row, position by position: answer ids, forwards, edits."""
    mask_id = model.config.mask_token_id
    P = len(prompt)
    x = torch.tensor([prompt + [mask_id] * G])
    nfe = edits = 0
    for lo in range(P, P + G, L):
        undecided = [lo + i for i in range(L)]
        soft: dict[int, torch.Tensor] = {}
        for _ in range(L):
            embeds = model.embed(x).clone()
            where = torch.zeros_like(x, dtype=torch.bool)
            for pos, p in soft.items():
                embeds[0, pos] = _soft(model, int(x[0, pos]), p, mask_id)
                where[0, pos] = True
            with torch.no_grad():
                logits = model(x, embed_override=(where, embeds))[0].float()
            nfe += 1
            probs = torch.softmax(logits, dim=-1)
            choice = logits.clone()
            choice[:, mask_id] = float("-inf")
            x0 = choice.argmax(dim=-1)
            p = probs.gather(1, x0[:, None])[:, 0]
            masked = [i for i in undecided if int(x[0, i]) == mask_id]
            commit = []
            for i in masked:  # left to right until the first below the threshold
                if float(p[i]) < threshold:
                    break
                commit.append(i)
            commit = commit or masked[:1]
            changed = False
            for i in undecided:
                if i in commit or (i not in masked and int(x0[i]) != int(x[0, i])):
                    edits += i not in masked
                    x[0, i] = x0[i]
                    changed = True
            if all(float(p[i]) >= settle for i in undecided) or not changed:
                break
            soft = {i: p[i] for i in undecided if int(x[0, i]) != mask_id}
    return x[0, P:].tolist(), nfe, edits


# settle (fixed at 0.9 in the published code) below it; the published threshold 0 and one more under -m exhaustive
SETTINGS = [pytest.param(0.3, 0.6, 4), pytest.param(0.5, 0.9, 4, marks=pytest.mark.exhaustive),
            pytest.param(0.0, 0.9, 4, marks=pytest.mark.exhaustive)]


@pytest.mark.parametrize(("threshold", "settle", "block"), SETTINGS)
def test_dmax_decodes_as_the_reference_loop(llada2, threshold, settle, block):
    prompts = prompts_for(llada2, (8, 8, 8), seed=1)
    out = spec_generate(llada2, torch.tensor(prompts), None, gen_length=16, block_length=block,
                        policy=build_policy("dmax", threshold=threshold, settle=settle), confidence_precision="float32")
    for b, prompt in enumerate(prompts):
        tokens, nfe, edits = _reference(llada2, prompt, 16, block, threshold, settle)
        assert (out.tokens[b].tolist(), out.records[b].nfe, out.records[b].edits) == (tokens, nfe, edits)
    assert sum(r.edits for r in out.records) > 0  # the settings exercise the rewriting


def test_dmax_on_the_trained_tiny_llada_and_in_bf16():
    """The committed tiny LLaDA in float32 and bfloat16: every answer position committed, edits counted per step."""
    for dtype in (torch.float32, torch.bfloat16):
        model = tiny_model("llada", dtype)
        prompts = prompts_for(model, (10, 10), seed=2)
        out = spec_generate(model, torch.tensor(prompts), None, gen_length=16, block_length=8,
                            policy=build_policy("dmax"), confidence_precision="float32", trace=True)
        assert (out.tokens != model.config.mask_token_id).all()
        for rec in out.records:
            assert sum(t.n_edited for t in rec.trace) == rec.edits
            assert sum(t.n_committed for t in rec.trace) == 16


def test_prefill_adds_one_forward_that_commits_nothing(llada2):
    prompts = torch.tensor(prompts_for(llada2, (8,), seed=5))
    runs = [spec_generate(llada2, prompts, None, gen_length=8, block_length=4, confidence_precision="float32",
                          policy=build_policy("dmax", threshold=0.3, prefill=p)) for p in (False, True)]
    assert runs[0].tokens.tolist() == runs[1].tokens.tolist()
    assert [(r.nfe + 1, r.edits) for r in runs[0].records] == [(r.nfe, r.edits) for r in runs[1].records]


def test_batch_decodes_as_each_row_alone(llada2):
    prompts = prompts_for(llada2, (8, 8, 8), seed=3)
    policy = build_policy("dmax", threshold=0.3)
    batch = spec_generate(llada2, torch.tensor(prompts), None, gen_length=16, block_length=4, policy=policy,
                          confidence_precision="float32")
    for b, p in enumerate(prompts):
        alone = spec_generate(llada2, torch.tensor([p]), None, gen_length=16, block_length=4, policy=policy,
                              confidence_precision="float32")
        assert batch.tokens[b].tolist() == alone.tokens[0].tolist()
        assert (batch.records[b].nfe, batch.records[b].edits) == (alone.records[0].nfe, alone.records[0].edits)


def test_an_adaptive_rule_commits_the_masks(llada2):
    prompts = prompts_for(llada2, (8,), seed=4)
    out = spec_generate(llada2, torch.tensor(prompts), None, gen_length=16, block_length=4,
                        policy=build_policy("dmax"), rule=build_rule("threshold", threshold=0.3),
                        confidence_precision="float32")
    assert (out.tokens != llada2.config.mask_token_id).all()


@pytest.mark.parametrize(("cache", "rule", "cfg", "needle"), [
    ("prefix", None, 0.0, "without a cache"),
    ("none", "topk", 0.0, "fixed-count rule"),
    ("none", "entropy_threshold", 0.0, "other units"),
    ("none", None, 1.0, "classifier-free guidance"),
])
def test_refused_combinations(cache, rule, cfg, needle):
    with pytest.raises(ValueError, match=needle):
        DecodeSpec(Decoding(16, 8, build_policy("dmax"), build_rule(rule) if rule else None, build_cache(cache)),
                   Sampling(cfg_scale=cfg))


@pytest.mark.parametrize(("params", "needle"), [({"threshold": 1.5}, "threshold must be"),
                                                ({"threshold": 0.95}, "must be <= settle"),
                                                ({"prefill": 1}, "must be bool"),
                                                ({"tau": 0.5}, "unknown")])
def test_bad_parameters_are_refused(params, needle):
    with pytest.raises(ValueError, match=needle):
        build_policy("dmax", **params)
