"""Fast-dLLM's Dream ``confidence_threshold`` loop (policy ``dream_threshold``): an independent reference,
goldens from the published code, slot-accounting properties and the combinations it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.decoding import (
    DreamThresholdPolicy,
    build_cache,
    build_policy,
    build_rule,
    check_combination,
)
from dllm_bench.decoding.policies import StepContext
from dllm_bench.models import load_model
from dllm_bench.tiny.encoding import prompt_ids

from .conftest import left_pad, prompts_for
from .spec_kwargs import spec_generate

ROOT = Path(__file__).resolve().parents[2]
TINY_DREAM = ROOT / "dllm_bench" / "tiny" / "checkpoints" / "tiny_dream"
PUZZLES = ROOT / "dllm_bench" / "tasks" / "sudoku_data" / "sudoku_test.jsonl"
GOLDEN = ROOT / "tests" / "fixtures" / "dream_threshold_published.json"


# ---------------------------------------------------------------- an independent reference loop


def reference_confidence_threshold(model, prompt: list[int], gen_length: int, steps: int, tau: float,
                                   dtype: torch.dtype = torch.float64) -> tuple[list[int], int]:
    """The published loop for one prompt, written plainly (python lists and loops on purpose).

    Each step offers ``gen_length // steps`` plus the previous step's empty slots to the most confident
    masked positions (ties: lower position), fills the first one and every later one >= tau. The first
    empty slot of the last planned step sets the per-step quota to 0 and adds one step. Returns (answer, NFE).
    """
    mask_id = model.config.mask_token_id
    P = len(prompt)
    x = list(prompt) + [mask_id] * gen_length
    per_step, carry, i, total = gen_length // steps, 0, 0, steps
    while i < total:
        logits = model(torch.tensor([x]))[0, P:].to(dtype)
        logits[:, mask_id] = float("-inf")  # the engine never predicts the mask token
        conf, x0 = torch.softmax(logits, dim=-1).max(dim=-1)
        masked = [j for j in range(gen_length) if x[P + j] == mask_id]
        offered = per_step + carry
        ranked = sorted(masked, key=lambda j: (-conf[j].item(), j))[:offered]
        carry = 0
        x[P + ranked[0]] = int(x0[ranked[0]])
        for k in range(1, offered):
            if k < len(ranked) and bool(conf[ranked[k]] >= tau):
                x[P + ranked[k]] = int(x0[ranked[k]])
                continue
            carry += 1
            if i == total - 1:
                per_step, total = 0, total + 1
        i += 1
    return x[P:], i


class MaskLogitOff:
    """The network with the mask token's logit at -1e4: its softmax share is exactly 0 in any precision, so
    whether a confidence keeps the mask token in its denominator cannot matter to these comparisons."""

    def __init__(self, model):
        self.model, self.config, self.tokenizer = model, model.config, model.tokenizer

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        logits = self.model(*args, **kwargs).clone()
        logits[..., self.config.mask_token_id] = -1e4
        return logits


def decode(model, prompts, steps, tau, gen_length, **kw):
    ids, mask = left_pad(prompts, model.config.pad_token_id)
    return spec_generate(model, ids, mask, gen_length=gen_length, block_length=gen_length,
                         policy=build_policy("dream_threshold", steps=steps, threshold=tau), **kw)


@pytest.mark.parametrize("steps,tau", [(2, 0.9), (4, 0.5), (4, 0.99), (8, 0.7), (16, 0.9)])
def test_random_dream_model_matches_the_reference(dream, steps, tau):
    model = MaskLogitOff(dream)
    prompts = prompts_for(dream, lengths=(9, 5, 12, 7), seed=3)
    out = decode(model, prompts, steps, tau, 16)
    for b, prompt in enumerate(prompts):
        tokens, nfe = reference_confidence_threshold(model, prompt, 16, steps, tau)
        assert out.tokens[b].tolist() == tokens
        assert out.records[b].nfe == nfe
        assert nfe >= steps


@pytest.fixture(scope="module")
def tiny_dream():
    return load_model(TINY_DREAM, device="cpu", dtype="float32")


def sudoku_prompts(model, n: int) -> list[list[int]]:
    rows = [json.loads(line) for line in PUZZLES.read_text().splitlines()[:n]]
    return [prompt_ids(model.tokenizer, r["puzzle"]) for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize("steps,tau,precision", [(3, 0.9, "float64"), (6, 0.5, "model"), (8, 0.9, "model")])
def test_tiny_dream_checkpoint_matches_the_reference(tiny_dream, steps, tau, precision):
    model = MaskLogitOff(tiny_dream)
    prompts = sudoku_prompts(tiny_dream, 6)
    out = decode(model, prompts, steps, tau, 24, confidence_precision=precision)
    dtype = torch.float64 if precision == "float64" else torch.float32
    for b, prompt in enumerate(prompts):
        tokens, nfe = reference_confidence_threshold(model, prompt, 24, steps, tau, dtype)
        assert (out.tokens[b].tolist(), out.records[b].nfe) == (tokens, nfe)


def test_tiny_dream_checkpoint_reproduces_the_published_code(tiny_dream):
    """Tokens and NFE recorded from the published loop itself (see the fixture's ``source``)."""
    golden = json.loads(GOLDEN.read_text())
    rows = {json.loads(line)["sample_id"]: json.loads(line) for line in PUZZLES.read_text().splitlines()[:10]}
    by_setting: dict[tuple[int, float], list[dict]] = {}
    for case in golden["cases"]:
        by_setting.setdefault((case["steps"], case["tau"]), []).append(case)
    assert len(by_setting) >= 4 and any(c["nfe"] > c["steps"] for c in golden["cases"])
    for (steps, tau), cases in by_setting.items():
        prompts = [prompt_ids(tiny_dream.tokenizer, rows[c["sample_id"]]["puzzle"]) for c in cases]
        out = decode(tiny_dream, prompts, steps, tau, golden["gen_length"], confidence_precision="model")
        assert out.tokens.tolist() == [c["tokens"] for c in cases]
        assert [r.nfe for r in out.records] == [c["nfe"] for c in cases]


def test_batched_equals_alone_on_the_random_model(dream):
    prompts = prompts_for(dream, lengths=(9, 5, 12), seed=7)
    batched = decode(dream, prompts, 4, 0.8, 16)
    for b, prompt in enumerate(prompts):
        alone = decode(dream, [prompt], 4, 0.8, 16)
        assert alone.tokens[0].tolist() == batched.tokens[b].tolist()
        assert alone.records[0].nfe == batched.records[b].nfe
    assert (batched.tokens != dream.config.mask_token_id).all()


# ---------------------------------------------------------------- slot accounting, without a network


def confidences(seed: int, row: int, step: int, G: int, tied: bool) -> torch.Tensor:
    """Scripted confidences of one row at one step (a function of row and step only, never of the batch)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + row * 1009 + step)
    if tied:
        levels = torch.tensor([0.3, 0.6, 0.9, 1.0], dtype=torch.float64)
        return levels[torch.randint(0, 4, (G,), generator=g)]
    return torch.rand(G, generator=g, dtype=torch.float64) ** 0.3


def drive(policy: DreamThresholdPolicy, rows: list[int], G: int, seed: int, tied: bool) -> list[dict]:
    """Run the policy as the engine does on scripted confidences; per row: commit counts, offered slots,
    passing counts and the accounting invariant after every step."""
    B = len(rows)
    state = policy.init_state(B, G, G, torch.device("cpu"))
    masked = torch.ones(B, G, dtype=torch.bool)
    active = torch.ones(B, dtype=torch.bool)
    log = [{"commits": [], "offered": [], "passing": [], "invariant": [], "nfe": 0} for _ in rows]
    step = 0
    while bool(active.any()):
        assert step <= G, "the loop must end within gen_length steps"
        cand = masked & active.unsqueeze(1)
        raw = torch.stack([confidences(seed, r, step, G, tied) for r in rows])
        conf = torch.where(cand, raw, float("-inf"))
        offered = (state.quota + state.carry).clone()
        ctx = StepContext(conf, cand, torch.zeros(B, G, dtype=torch.long), masked.clone(), None)
        commit, _ = policy.decide(state, ctx, None)
        assert not (commit & ~cand).any()
        masked &= ~commit
        finished = policy.advance(state, masked, active) & active
        for b in active.nonzero().squeeze(1).tolist():
            entry = log[b]
            entry["commits"].append(int(commit[b].sum()))
            entry["offered"].append(int(offered[b]))
            entry["passing"].append(int((cand[b] & (conf[b] >= policy.threshold)).sum()))
            left = int(state.quota[b] * (state.planned[b] - state.step[b]) + state.carry[b])
            entry["invariant"].append((int(masked[b].sum()), left))
            entry["nfe"] += 1
        active &= ~finished
        step += 1
    for b, entry in enumerate(log):
        entry["masked_left"] = int(masked[b].sum())
    return log


@settings(max_examples=60, deadline=None)
@given(
    G=st.sampled_from([4, 6, 8, 12, 16]),
    steps_index=st.integers(0, 5),
    tau=st.sampled_from([0.3, 0.6, 0.9, 0.95, 1.0]),
    seed=st.integers(0, 10_000),
    tied=st.booleans(),
    batch=st.integers(1, 4),
)
def test_slot_accounting_properties(G, steps_index, tau, seed, tied, batch):
    divisors = [d for d in range(1, G + 1) if G % d == 0]
    steps = divisors[steps_index % len(divisors)]
    policy = build_policy("dream_threshold", steps=steps, threshold=tau)
    rows = list(range(batch))
    log = drive(policy, rows, G, seed, tied)
    for r, entry in zip(rows, log):
        assert entry["masked_left"] == 0
        assert all(c >= 1 for c in entry["commits"])
        # top-1 always, then every offered slot whose candidate reaches tau
        assert entry["commits"] == [min(o, max(1, p)) for o, p in zip(entry["offered"], entry["passing"])]
        assert all(masks == left for masks, left in entry["invariant"])
        assert steps <= entry["nfe"] <= G
        # the planned steps offer quota + carry; every step after them offers only what is left
        assert entry["offered"][0] == G // steps
        for i in range(1, entry["nfe"]):
            quota = G // steps if i < steps else 0
            assert entry["offered"][i] == quota + entry["offered"][i - 1] - entry["commits"][i - 1]
        # a step beyond the planned ones exists only because the step before it left a slot empty
        for i in range(steps, entry["nfe"]):
            assert entry["commits"][i - 1] < entry["offered"][i - 1]
        alone = drive(policy, [r], G, seed, tied)[0]
        assert alone == entry


# ---------------------------------------------------------------- building and refusing


@pytest.mark.parametrize("params,bad", [
    ({"steps": 0}, "steps"), ({"steps": -2}, "steps"), ({"steps": 2.5}, "steps"), ({"steps": True}, "steps"),
    ({"steps": 4, "threshold": 0.0}, "threshold"), ({"steps": 4, "threshold": 1.2}, "threshold"), ({"steps": 4, "threshold": "0.9"}, "threshold"),
    ({"steps": 4, "alg": "entropy"}, "alg"),
])
def test_build_refuses_bad_values_in_one_line(params, bad):
    with pytest.raises(ValueError, match=bad) as err:
        build_policy("dream_threshold", **params)
    assert "\n" not in str(err.value)


def test_build_defaults_to_the_published_threshold():
    pol = build_policy("dream_threshold", steps=8)
    assert (pol.name, pol.steps, pol.threshold) == ("dream_threshold", 8, 0.9)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(rule=("threshold", {"threshold": 0.9})), "rule must be None"),
    (dict(rule=("topk", {})), "rule must be None"),
    (dict(block_length=8), "no blocks"),
    (dict(steps=5), "must divide gen_length"),
    (dict(cache=("prefix", {"compat_first_token": True})), "without a cache"),
    (dict(cache=("dual", {})), "without a cache"),
    (dict(cache=("dllm", {})), "without a cache"),
    (dict(cfg_scale=1.0), "classifier-free guidance"),
])
def test_check_combination_refuses_what_the_published_loop_never_ran(kwargs, needle):
    pol = build_policy("dream_threshold", steps=kwargs.get("steps", 4))
    sel = build_rule(kwargs["rule"][0], **kwargs["rule"][1]) if "rule" in kwargs else None
    cache_name, cache_params = kwargs.get("cache", ("none", {}))
    cache = build_cache(cache_name, **cache_params)
    with pytest.raises(ValueError, match=needle) as err:
        check_combination(pol, sel, cache, gen_length=16, block_length=kwargs.get("block_length", 16),
                          cfg_scale=kwargs.get("cfg_scale", 0.0))
    assert "\n" not in str(err.value)


def test_generate_refuses_another_confidence_measure(dream):
    with pytest.raises(ValueError, match="dream_threshold.*top1_prob"):
        decode(dream, prompts_for(dream)[:1], 4, 0.9, 16, confidence="margin")
