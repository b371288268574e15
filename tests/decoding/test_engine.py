"""The generate loop on the tiny checkpoints: reference-loop equivalence, batching, cache equivalences."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.decoding import build_cache, build_policy, build_rule

from .conftest import left_pad, prompts_for
from .spec_kwargs import spec_generate

G, BL = 16, 8


def run(model, prompts, *, policy=("blocks", {}), rule=("frechet", {"delta": 0.2}), cache=("none", {}),
        gen_length=G, block_length=BL, **kw):
    ids, mask = left_pad(prompts, model.config.pad_token_id)
    sel = build_rule(rule[0], **rule[1]) if rule else None
    return spec_generate(model, ids, mask, gen_length=gen_length, block_length=block_length,
                         policy=build_policy(policy[0], **policy[1]), rule=sel,
                         cache=build_cache(cache[0], **cache[1]), **kw)


# ---------------------------------------------------------------- an independent reference loop


def reference_decode(model, prompt, rule, param=None, steps=None):
    """Deliberately simple semi-autoregressive decode of one prompt, no cache (python loops on purpose)."""
    mask_id = model.config.mask_token_id
    x = torch.tensor([prompt + [mask_id] * G])
    P = len(prompt)
    nfe = 0
    for block in range(G // BL):
        lo, hi = P + block * BL, P + (block + 1) * BL
        per_block = steps // (G // BL) if steps else None
        i = 0
        while (i < per_block) if rule == "topk" else bool((x[0, lo:hi] == mask_id).any()):
            probs = torch.softmax(model(x).double()[0], dim=-1)  # the mask token stays in the denominator
            probs[:, mask_id] = -1.0  # ... but is never chosen
            conf, x0 = probs.max(dim=-1)
            masked = [j for j in range(lo, hi) if x[0, j] == mask_id]
            order = sorted(masked, key=lambda j: (-conf[j].item(), j))
            c = [conf[j].item() for j in order]
            if rule == "topk":
                n = BL // per_block + (1 if i < BL % per_block else 0)
            elif rule == "threshold":
                n = max(1, sum(v >= param for v in c))
            else:  # frechet
                n = 1
                for k in range(1, len(c) + 1):
                    lower = max(0.0, sum(c[:k]) - (k - 1))
                    if lower - (1 - c[k - 1]) > param:
                        n = k
            for j in order[:n]:
                x[0, j] = x0[j]
            nfe += 1
            i += 1
    return x[0, P:], nfe


@pytest.mark.parametrize("rule,param,steps", [("topk", None, 8), ("threshold", 0.6, None), ("frechet", 0.1, None)])
def test_engine_matches_simple_reference_loop(llada, rule, param, steps):
    rule_spec = {"topk": ("topk", {}), "threshold": ("threshold", {"threshold": param}),
                "frechet": ("frechet", {"delta": param})}[rule]
    for prompt in prompts_for(llada):
        want, want_nfe = reference_decode(llada, prompt, rule, param, steps)
        out = run(llada, [prompt], rule=rule_spec, policy=("blocks", {"steps": steps}))
        assert out.tokens[0].tolist() == want.tolist()
        assert out.records[0].nfe == want_nfe


# ---------------------------------------------------------------- batched == alone

RULES = {
    "topk": (("topk", {}), ("blocks", {"steps": 8})),
    "threshold": (("threshold", {"threshold": 0.7}), ("blocks", {})),
    "factor": (("factor", {"f": 1.0}), ("blocks", {})),
    "factor_compat": (("factor", {"f": 1.0, "compat": True}), ("blocks", {})),
    "frechet": (("frechet", {"delta": 0.2}), ("blocks", {})),
    "slowfast": (None, ("slowfast", {"preset": "code"})),
}
CACHES = {
    "none": ("none", {}),
    "prefix": ("prefix", {}),
    "dual": ("dual", {}),
    "dllm": ("dllm", {"prompt_interval": 4, "response_interval": 2, "verify_ratio": 0.25}),
}


@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize("rule", sorted(RULES))
def test_batched_equals_alone(llada, rule, cache):
    sel, pol = RULES[rule]
    prompts = prompts_for(llada)
    batched = run(llada, prompts, rule=sel, policy=pol, cache=CACHES[cache])
    for i, prompt in enumerate(prompts):
        alone = run(llada, [prompt], rule=sel, policy=pol, cache=CACHES[cache])
        assert batched.tokens[i].tolist() == alone.tokens[0].tolist()
        assert batched.records[i].nfe == alone.records[0].nfe
    assert (batched.tokens != llada.config.mask_token_id).all()


@pytest.mark.parametrize("cache", ["none", "prefix", "dual", "dllm"])
@pytest.mark.parametrize("rule", ["topk", "threshold", "frechet"])
def test_dream_batched_equals_alone(dream, rule, cache):
    sel, pol = RULES[rule]
    prompts = prompts_for(dream, seed=1)
    batched = run(dream, prompts, rule=sel, policy=pol, cache=CACHES[cache])
    for i, prompt in enumerate(prompts):
        alone = run(dream, [prompt], rule=sel, policy=pol, cache=CACHES[cache])
        assert batched.tokens[i].tolist() == alone.tokens[0].tolist()
        assert batched.records[i].nfe == alone.records[0].nfe


def test_rows_finish_at_different_steps_and_stop_costing(llada):
    out = run(llada, prompts_for(llada), rule=("threshold", {"threshold": 0.7}))
    nfes = [r.nfe for r in out.records]
    assert len(set(nfes)) > 1  # the rows really desynchronise, so the batched test exercises cohorts
    # no cache: every forward computes the row's real prompt tokens (not the batch's left padding) and the answer
    assert [r.forward_positions for r in out.records] == [n * (len(p) + G) for n, p in zip(nfes, prompts_for(llada))]


# ---------------------------------------------------------------- cache equivalences


def test_dllm_cache_refreshing_everything_equals_no_cache(llada, dream):
    for model in (llada, dream):
        prompts = prompts_for(model)
        base = run(model, prompts)
        full = run(model, prompts, cache=("dllm", {"prompt_interval": 1, "response_interval": 1, "verify_ratio": 0.0}))
        assert torch.equal(base.tokens, full.tokens)
        assert [r.nfe for r in base.records] == [r.nfe for r in full.records]


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_kv_cache_one_block_refreshed_every_step_equals_no_cache(llada, dream, cache):
    for model in (llada, dream):
        prompts = prompts_for(model)
        base = run(model, prompts, block_length=G)
        cached = run(model, prompts, block_length=G, cache=(cache, {"refresh_every": 1}))
        assert torch.equal(base.tokens, cached.tokens)
        assert [r.nfe for r in base.records] == [r.nfe for r in cached.records]


def test_prefix_and_dual_compute_fewer_positions(llada):
    prompts = prompts_for(llada)
    base = run(llada, prompts, rule=("topk", {}), policy=("blocks", {"steps": 8}))
    for cache in ("prefix", "dual"):
        out = run(llada, prompts, rule=("topk", {}), policy=("blocks", {"steps": 8}), cache=(cache, {}))
        assert [r.nfe for r in out.records] == [r.nfe for r in base.records]
        assert all(o.forward_positions < b.forward_positions for o, b in zip(out.records, base.records))


def test_dream_compat_first_token_commits_only_the_block_start_at_refresh(dream):
    out = run(dream, prompts_for(dream)[:1], cache=("dual", {"compat_first_token": True}), trace=True)
    trace = out.records[0].trace
    refresh_steps = [0] + [i for i in range(1, len(trace)) if len(trace[i].sorted_confidences) == BL]
    assert all(trace[i].n_committed == 1 for i in refresh_steps)


# ---------------------------------------------------------------- Dream policy, oracle, options


@pytest.mark.parametrize("alg", ["maskgit_plus", "topk_margin", "entropy", "origin"])
def test_dream_policy_runs_exactly_steps_and_fills_everything(dream, alg):
    prompts = prompts_for(dream)
    out = run(dream, prompts, policy=("dream", {"steps": 6, "alg": alg}), rule=None, block_length=G, seed=[1, 2, 3])
    assert all(r.nfe == 6 for r in out.records)
    assert (out.tokens != dream.config.mask_token_id).all()
    alone = run(dream, prompts[1:2], policy=("dream", {"steps": 6, "alg": alg}), rule=None, block_length=G, seed=2)
    assert out.tokens[1].tolist() == alone.tokens[0].tolist()


def test_oracle_reproduces_sequential_decode_with_fewer_forwards(llada):
    prompts = prompts_for(llada)
    sequential = run(llada, prompts, rule=("topk", {}), policy=("blocks", {"steps": G}))
    oracle = run(llada, prompts, rule=("oracle", {}), reference=sequential.tokens)
    assert torch.equal(oracle.tokens, sequential.tokens)
    assert all(o.nfe <= s.nfe for o, s in zip(oracle.records, sequential.records))
    assert any(o.nfe < s.nfe for o, s in zip(oracle.records, sequential.records))


def test_early_stop_ends_rows_at_their_first_stop_token(llada):
    eos = llada.config.eos_token_id
    prompts = prompts_for(llada)
    base = run(llada, prompts, rule=("topk", {}), policy=("blocks", {"steps": G}))
    # choose a stop id that the decode actually produces early in some row
    stop = int(base.tokens[0, 2])
    early = run(llada, prompts, rule=("topk", {}), policy=("blocks", {"steps": G}), early_stop=True,
                stop_token_ids=[stop, eos])
    for b in range(len(prompts)):
        row = base.tokens[b].tolist()
        if stop in row:
            cut = row.index(stop)
            assert early.tokens[b, : cut + 1].tolist() == row[: cut + 1]
            assert early.records[b].nfe <= base.records[b].nfe
    assert early.records[0].nfe < base.records[0].nfe


def test_forbidden_tokens_temperature_and_cfg(llada):
    prompts = prompts_for(llada)
    base = run(llada, prompts)
    banned = sorted(set(base.tokens.flatten().tolist()))[:2]
    out = run(llada, prompts, forbidden_token_ids=banned)
    assert not torch.isin(out.tokens, torch.tensor(banned)).any()
    hot = run(llada, prompts, temperature=1.0, seed=[5, 6, 7])
    again = run(llada, prompts, temperature=1.0, seed=[5, 6, 7])
    assert torch.equal(hot.tokens, again.tokens)
    cfg = run(llada, prompts, cfg_scale=1.0)
    assert (cfg.tokens != llada.config.mask_token_id).all()
    assert not torch.equal(cfg.tokens, base.tokens) or [r.nfe for r in cfg.records] != [r.nfe for r in base.records]


def test_model_kwargs_reach_every_forward_sliced_to_the_rows_run(llada):
    seen = []

    class Recorder:
        config = llada.config

        def __call__(self, input_ids, attention_mask=None, cache=None, start=0, extra=None):
            seen.append((input_ids.shape[0], extra.shape[0], extra[:, 0].tolist()))
            return llada(input_ids, attention_mask=attention_mask, cache=cache, start=start)

    prompts = prompts_for(llada)
    ids, mask = left_pad(prompts, llada.config.pad_token_id)
    extra = torch.arange(3).unsqueeze(1).expand(3, ids.shape[1] + G)
    spec_generate(Recorder(), ids, mask, gen_length=G, block_length=BL, policy=build_policy("blocks"),
                  rule=build_rule("threshold", threshold=0.7), cache=build_cache("dual"), model_kwargs={"extra": extra})
    assert all(b == e for b, e, _ in seen)
    assert any(rows != [0, 1, 2] for _, _, rows in seen)  # finished rows were dropped from some forwards


def test_token_counts_and_trace(llada):
    tok = llada.tokenizer
    prompts = prompts_for(llada)
    out = run(llada, prompts, tokenizer=tok, stop_strings=["\n"], trace=True)
    rec = out.records[0]
    assert rec.token_counts["tokens_gen_length"] == G
    assert rec.token_counts["tokens"] <= rec.token_counts["tokens_non_eos"] <= G
    assert rec.tokens_per_forward == rec.token_counts["tokens"] / rec.nfe
    step = rec.trace[0]
    assert step.sorted_confidences == sorted(step.sorted_confidences, reverse=True)
    assert step.frechet_core is not None and step.frechet_bonus >= -1e-12
    assert sum(t.n_committed for t in rec.trace) == G


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_oracle_batched_equals_alone(llada, cache):
    prompts = prompts_for(llada)
    reference = run(llada, prompts, rule=("topk", {}), policy=("blocks", {"steps": G})).tokens
    batched = run(llada, prompts, rule=("oracle", {}), cache=CACHES[cache], reference=reference)
    for i, prompt in enumerate(prompts):
        alone = run(llada, [prompt], rule=("oracle", {}), cache=CACHES[cache], reference=reference[i : i + 1])
        assert batched.tokens[i].tolist() == alone.tokens[0].tolist()
        assert batched.records[i].nfe == alone.records[0].nfe


def test_candidate_rows_equal_boolean_indexing_for_views_and_cut_windows():
    from dllm_bench.decoding.confidence import Workspace
    from dllm_bench.decoding.engine import _candidate_rows

    g = torch.Generator().manual_seed(0)
    full = torch.randn(3, 10, 7, generator=g)
    cand = torch.rand(3, 4, generator=g) > 0.4
    for window in (full[:, 3:7], full[:1, 3:7], full[:, :4].contiguous()):  # cut rows of a batch, batch 1, a view
        c = cand[: window.shape[0]]
        assert c.any()
        where = c.reshape(-1).nonzero().squeeze(1)
        assert torch.equal(_candidate_rows(window, where, Workspace()), window[c])
