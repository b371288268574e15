"""Block diffusion (policy ``block_diffusion``): Fast-dLLM v2's loop as published, SDAR's and LLaDA2.0's rule against a
loop written here, the committed-block K/V against recomputing the prefix, batches, bf16, configured rules and the
one-line refusals.

Goldens (``tests/fixtures/fast_dllm_v2_published.json``; how: its ``source``): the published Fast-dLLM v2 ``generate``
(HF modeling.py) run on random-weight checkpoints in its exact format, per setting and puzzle: answer ids and its
forward calls. Our NFE counts every forward of the decode: the published ``step_count`` plus the prompt's forward
(which it does not count), minus the store forward of the last block, whose token lies past the answer (we do not
run it). The first puzzles of the settings the trained checkpoints' goldens lack run by default (blocks of 16,
tau 1; the trained ones: test_block_diffusion_published.py), ``-m exhaustive`` every puzzle of every setting; the loop
written here runs each K/V mode and each schedule once by default, every pair of them under ``-m exhaustive``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import Accounting, DecodeSpec, Decoding, Sampling, build_policy, generate
from dllm_bench.decoding.rules import build_rule
from dllm_bench.decoding.spec import TokenIds
from dllm_bench.models import load_model
from dllm_bench.models.tiny_blocks import make_random_block_checkpoint
from dllm_bench.tiny.encoding import prompt_ids

from .machine_goldens import NEAR_TIE, decision_margin, same_machine
from .published_goldens import weights_sha256

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = "fast_dllm_v2_published.json"
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / FIXTURE).read_text())
PUZZLES = ROOT / "dllm_bench" / "tasks" / "sudoku_data" / "sudoku_test.jsonl"
RANDOM = ROOT / "dllm_bench" / "tiny" / "checkpoints"
DEFAULT_PUZZLES = 2
STOP = 102


@cache
def _checkpoint(block_size: int) -> Path:
    """The golden's checkpoint at that block size, rebuilt (its weights' digest is in the fixture)."""
    import tempfile

    ck = GOLDEN["checkpoint"]
    path = make_random_block_checkpoint(Path(tempfile.mkdtemp()) / f"fast_bs{block_size}", "fast_dllm_v2",
                                        seed=ck["seed"], init_std=ck["init_std"], block_size=block_size)
    assert weights_sha256(path) == ck["weights_sha256"][str(block_size)], "the golden's weights changed: re-record"
    return path


@cache
def _model(path: Path, dtype: torch.dtype = torch.float32):
    return load_model(path, device="cpu", dtype=dtype)


@cache
def _prompts() -> dict[str, list[int]]:
    rows = [json.loads(line) for line in PUZZLES.read_text().splitlines()]
    tokenizer = _model(RANDOM / "random_fast_dllm_v2").tokenizer
    return {r["sample_id"]: prompt_ids(tokenizer, r["puzzle"]) for r in rows}


def _published_length(prompt_length: int, setting: dict) -> int:
    """The answer the published loop decodes: to the end of its last block on the grid (its last store's token
    excluded)."""
    bs = setting["block_length"]
    return (prompt_length // bs + setting["max_new_tokens"] // bs) * bs - prompt_length


def _fast_spec(setting: dict, G: int, trace: bool = False, **policy) -> DecodeSpec:
    pol = build_policy("block_diffusion", sub_block=setting["sub_block"], threshold=setting["tau"], **policy)
    # the published run's shim takes the mask out of the softmax (fixture source)
    sampling = Sampling(confidence_precision="model", confidence_mask_in_softmax=False)
    return DecodeSpec(Decoding(G, setting["block_length"], pol, early_stop=True), sampling, Accounting(trace=trace),
                      TokenIds(stop=(STOP,)))


def _until_stop(ids: list[int]) -> list[int]:
    return ids[: ids.index(STOP) + 1] if STOP in ids else ids


def _case(i: int, setting: dict, full: bool):
    label = f"b{setting['block_length']}-sub{setting['sub_block']}-tau{setting['tau']}" + ("-all" if full else "")
    # make test: the settings the trained checkpoints' goldens lack (blocks of 16, tau 1), the rest with -m exhaustive
    default = not full and (setting["block_length"] == 16 or setting["tau"] == 1.0)
    return pytest.param(i, full, id=label, marks=[] if default else [pytest.mark.exhaustive])


@pytest.mark.parametrize(("index", "full"), [_case(i, s, f) for i, s in enumerate(GOLDEN["settings"])
                                             for f in (False, True)])
def test_fast_dllm_v2_decodes_as_its_published_generate(index, full):
    setting = GOLDEN["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    model = _model(_checkpoint(setting["block_length"]))
    here = same_machine(FIXTURE)
    compared = 0
    for sample_id, want, calls in rows:
        prompt = _prompts()[sample_id]
        G = _published_length(len(prompt), setting)
        with torch.no_grad():
            out = generate(model, torch.tensor([prompt]), None, _fast_spec(setting, G, trace=not here))
        if not here and decision_margin(out.records[0].trace, setting["tau"], probabilities=True) < NEAR_TIE:
            continue  # a near-tie another machine may round the other way
        compared += 1
        got = _until_stop(out.tokens[0].tolist())
        assert got == _until_stop(want[:G]), sample_id
        assert out.records[0].nfe == calls - (len(want) > G), sample_id  # the last block's store: past the answer
    assert compared or not here


@cache
def _sdar(dtype: torch.dtype = torch.float32):
    return _model(RANDOM / "random_sdar", dtype)


def _reference_dynamic(model, prompt: list[int], G: int, bs: int, steps: int, tau: float) -> tuple[list[int], int]:
    """SDAR's / LLaDA2.0's loop, written out: blocks on the grid from the prompt's start, the prefix recomputed,
    every masked token above tau if at least the step's scheduled count k, else the k most confident."""
    mask = model.config.mask_token_id
    P = len(prompt)
    x = prompt + [mask] * G
    base, extra = divmod(bs, steps)
    schedule = [base + (s < extra) for s in range(steps)]
    nfe = 0
    for start in range(P // bs * bs, P + G, bs):
        end = min(start + bs, P + G)
        for step in range(steps):
            masked = [i for i in range(start, end) if x[i] == mask]
            if not masked:
                break
            with torch.no_grad():
                logits = model(torch.tensor([x[:end]]))[0].double()
            nfe += 1
            probs = torch.softmax(logits, dim=-1)
            best = logits.index_fill(1, torch.tensor([mask]), float("-inf")).argmax(dim=-1)  # the mask: no prediction
            conf = {i: float(probs[i, best[i]]) for i in masked}
            k = len(masked) if step == steps - 1 else min(schedule[step], len(masked))
            above = [i for i in masked if conf[i] > tau]
            chosen = above if len(above) >= k else sorted(masked, key=lambda i: -conf[i])[:k]
            for i in chosen:
                x[i] = int(best[i])
    return x[P:], nfe


@pytest.mark.parametrize(("kv_cache", "steps", "tau"), [  # make test: each K/V mode and schedule once
    pytest.param(kv, steps, tau, id=f"{steps}-{tau}-{kv}", marks=[] if (kv == "committed") == (steps == 2)
                 else [pytest.mark.exhaustive]) for kv in ("none", "committed") for steps, tau in ((4, 0.9), (2, 0.5))])
def test_sdar_and_llada2_rule_equals_a_loop_written_here(kv_cache, steps, tau):
    """``steps`` set: SDAR's ``low_confidence_dynamic`` / LLaDA2.0's threshold with its scheduled fallback; the
    committed-block K/V decode as the recomputed prefix (block-causal: a committed block's K/V never change)."""
    model = _sdar()
    pol = build_policy("block_diffusion", steps=steps, threshold=tau, kv_cache=kv_cache)
    for sample_id in list(_prompts())[:2]:
        prompt = _prompts()[sample_id]
        G = 14  # the prompt (76) ends on the grid of 4: blocks of 4, the last one cut at the answer's end
        want, nfe = _reference_dynamic(model, prompt, G, 4, steps, tau)
        with torch.no_grad():
            out = generate(model, torch.tensor([prompt]), None, DecodeSpec(Decoding(G, 4, pol)))
        assert out.tokens[0].tolist() == want, sample_id
        stores = (76 + G - 1) // 4 - 76 // 4 + 1 if kv_cache == "committed" else 0  # the prompt's, then each block's but the last
        assert out.records[0].nfe == nfe + stores


def test_a_batch_decodes_each_row_as_alone():
    """Rows whose blocks end at different steps go on with their own copy of the stored K/V: tokens and NFE as
    alone."""
    model = _model(RANDOM / "random_fast_dllm_v2")
    setting = {"block_length": 4, "sub_block": 2, "tau": 0.7}
    ids = list(_prompts())[:3]
    batch = torch.tensor([_prompts()[s] for s in ids])
    with torch.no_grad():
        together = generate(model, batch, None, _fast_spec(setting, 12))
        alone = [generate(model, batch[i : i + 1], None, _fast_spec(setting, 12)) for i in range(3)]
    for i, out in enumerate(alone):
        assert together.tokens[i].tolist() == out.tokens[0].tolist()
        assert together.records[i].nfe == out.records[0].nfe


@pytest.mark.parametrize("kv_cache", ["committed", "none"])
def test_a_left_padded_row_decodes_on_its_own_grid(kv_cache):
    """Prompts of 76 and 75 ids: the padded row's blocks start where its own prompt puts them."""
    model = _sdar()
    prompts = [_prompts()[s] for s in list(_prompts())[:2]]
    short = prompts[1][1:]
    batch = torch.tensor([prompts[0], [0] + short])
    mask = torch.ones_like(batch)
    mask[1, 0] = 0
    spec = DecodeSpec(Decoding(9, 4, build_policy("block_diffusion", steps=4, kv_cache=kv_cache)))
    with torch.no_grad():
        padded = generate(model, batch, mask, spec)
        alone = [generate(model, torch.tensor([p]), None, spec) for p in (prompts[0], short)]
    for i in range(2):
        assert padded.tokens[i].tolist() == alone[i].tokens[0].tolist()
        assert padded.records[i].nfe == alone[i].records[0].nfe


@pytest.mark.parametrize("rule,params", [("threshold", {"threshold": 0.7}), ("frechet", {}), ("eb_sampler", {}),
                                         ("factor", {})])
def test_field_rules_commit_inside_the_sub_blocks_of_fast_dllm_v2(rule, params):
    """A rule no published block-diffusion code has (Fréchet on Fast-dLLM v2) is one setting; every commit lies in
    the step's sub-block."""
    model = _model(RANDOM / "random_fast_dllm_v2")
    pol = build_policy("block_diffusion", sub_block=2, threshold=0.95)
    spec = DecodeSpec(Decoding(12, 4, pol, build_rule(rule, **params)), accounting=Accounting(trace=True))
    with torch.no_grad():
        out = generate(model, torch.tensor([_prompts()[s] for s in list(_prompts())[:2]]), None, spec)
    assert not (out.tokens == model.config.mask_token_id).any()
    assert all(1 <= step.n_committed <= 2 for rec in out.records for step in rec.trace)


def test_a_fixed_count_rule_runs_with_steps_and_an_adaptive_one_refuses_them():
    model = _sdar()
    spec = DecodeSpec(Decoding(12, 4, build_policy("block_diffusion", steps=2), build_rule("topk")))
    with torch.no_grad():
        out = generate(model, torch.tensor([_prompts()["sudoku4-0000"]]), None, spec)
    assert not (out.tokens == model.config.mask_token_id).any()
    with pytest.raises(ValueError, match="rule 'threshold' is adaptive .* needs steps=None, got steps=2"):
        DecodeSpec(Decoding(12, 4, build_policy("block_diffusion", steps=2), build_rule("threshold")))
    with pytest.raises(ValueError, match="rule 'topk' commits a scheduled count: .* needs steps"):
        DecodeSpec(Decoding(12, 4, build_policy("block_diffusion"), build_rule("topk")))


@pytest.mark.parametrize("bad,match", [
    (dict(sub_block=0), "sub_block must be an integer >= 1 or None, got 0"),
    (dict(steps=0), "steps must be an integer >= 1 or None, got 0"),
    (dict(threshold=1.5), "threshold must be in \\[0, 1\\], got 1.5"),
    (dict(kv_cache="dual"), "kv_cache must be one of committed, none, got 'dual'"),
    (dict(sdar_topk=True), "sdar_topk is SDAR's scheduled top-k: it needs steps \\(per block\\), got steps=None"),
    (dict(steps=2, sdar_topk="yes"), "parameter sdar_topk='yes' must be bool"),
])
def test_bad_parameters_are_refused_in_one_line(bad, match):
    with pytest.raises(ValueError, match=match) as err:
        build_policy("block_diffusion", **bad)
    assert "\n" not in str(err.value)


def test_combinations_it_cannot_run_are_refused_in_one_line():
    from dllm_bench.decoding import build_cache

    pol = build_policy("block_diffusion", sub_block=3)
    with pytest.raises(ValueError, match="block_length 4 is not a multiple of block_diffusion sub_block 3"):
        DecodeSpec(Decoding(8, 4, pol))
    with pytest.raises(ValueError, match="with sdar_topk commits by SDAR's own rule: run it with rule=none, got 'topk'"):
        DecodeSpec(Decoding(8, 4, build_policy("block_diffusion", steps=2, sdar_topk=True), build_rule("topk")))
    with pytest.raises(ValueError, match="keeps its own K/V .* got cache='prefix'"):
        DecodeSpec(Decoding(8, 4, build_policy("block_diffusion"), build_rule("threshold"), build_cache("prefix")))


@pytest.mark.parametrize("name,policy", [("random_fast_dllm_v2", dict(sub_block=2, threshold=0.9)),
                                         ("random_sdar", dict(steps=4)), ("random_sdar", dict(steps=2, sdar_topk=True)),
                                         ("random_llada2", dict(steps=2, kv_cache="none"))])
def test_bf16_decodes_every_position(name, policy):
    model = _model(RANDOM / name, torch.bfloat16)
    spec = DecodeSpec(Decoding(12, 4, build_policy("block_diffusion", **policy)))
    with torch.no_grad():
        out = generate(model, torch.tensor([_prompts()[s] for s in list(_prompts())[:2]]), None, spec)
    assert not (out.tokens == model.config.mask_token_id).any()
    assert all(3 <= r.nfe <= 12 + 4 for r in out.records)
