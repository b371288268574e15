"""The caches against independent plain references of the published semantics (tests/decoding/reference_caches.py).

dLLM-Cache per forward (logits) over a K_p x K_r x rho grid whose schedules include both-, prompt-only,
response-only and neither-refresh steps, with canvases that change between forwards and a cut canvas; then
whole decodes (tokens, NFE) for dLLM-Cache, prefix and dual caches with stale K/V, LLaDA and Dream. By default the
cases that cover each of a grid's code-path values (``covering_cases``), ``-m exhaustive`` the whole grids.
"""

from __future__ import annotations

import pytest
import torch

from dllm_bench.decoding import build_cache, build_policy, build_rule
from dllm_bench.models import load_model
from dllm_bench.models.cache import FeatureCache, KVCache

from .conftest import prompts_for
from .published_goldens import covering_settings
from .reference_caches import PlainDLLMCache, PlainKVCache, PlainNetwork
from .spec_kwargs import spec_generate

pytestmark = pytest.mark.golden  # bit equality between code paths: checked under every kernel width

G, BL = 16, 8
SCALE = 20.0  # the engine fixtures' logit sharpening (conftest.SharpenedNetwork)


def schedule_kinds(Kp: int, Kr: int, forwards: int) -> set[str]:
    kinds = set()
    for step in range(1, forwards + 1):
        rp, rr = (step - 1) % Kp == 0, (step - 1) % Kr == 0
        kinds.add({(True, True): "both", (True, False): "prompt", (False, True): "response"}.get((rp, rr), "neither"))
    return kinds


GRID = [(Kp, Kr, rho) for Kp, Kr in [(1, 1), (2, 3), (3, 2), (4, 3), (1, 4)] for rho in (0.0, 0.25, 0.5, 1.0)]


def test_grid_covers_every_kind_of_step():
    assert set().union(*(schedule_kinds(Kp, Kr, 7) for Kp, Kr, _ in GRID)) == {"both", "prompt", "response", "neither"}
    assert schedule_kinds(2, 3, 7) == {"both", "prompt", "response", "neither"}


# ---------------------------------------------------------------- dLLM-Cache, per forward


def canvases(model, prompt: list[int], forwards: int, seed: int = 0) -> list[torch.Tensor]:
    """Canvases that change between forwards: each forward redraws 8 of the first 10 answer slots (visible also
    when the canvas is cut there) to new tokens, so V-verify's least similar tokens are never a near-tie of
    unchanged ones (unchanged tokens have cosine similarity 1 at layer 0, where the order would be arbitrary)."""
    g = torch.Generator().manual_seed(seed)
    mask_id = model.config.mask_token_id
    x = torch.tensor(prompt + [mask_id] * G)
    out = []
    for _ in range(forwards):
        out.append(x.clone())
        for j in torch.randperm(10, generator=g)[:8].tolist():
            old = int(x[len(prompt) + j])
            new = int(torch.randint(0, min(mask_id, 90) - 1, (1,), generator=g))
            x[len(prompt) + j] = new + (new >= old)  # never the token already there
    return out


def covering_cases(names: str, cases: list[tuple], paths, order: str) -> list:
    """pytest params of ``cases`` (tuples of ``names``): by default those covering the code-path values ``paths``
    names (published_goldens.covering_settings), the rest under -m exhaustive; ids join the values of ``order``."""
    keys = names.split(",")
    default = covering_settings([dict(zip(keys, c, strict=True)) for c in cases], paths)
    return [pytest.param(*c, marks=[] if i in default else [pytest.mark.exhaustive],
                         id="-".join(str(dict(zip(keys, c))[k]) for k in order.split(","))) for i, c in enumerate(cases)]


FORWARD = "flavour,layer0,Kp,Kr,rho"


# make test: the cases in which each flavour meets each layer-0 mode, and each interval pair, verify ratio and kind
# of step occur; -m exhaustive the whole grid
@pytest.mark.parametrize(FORWARD, covering_cases(FORWARD, [
    (flavour, layer0, *grid) for flavour in ("llada", "dream") for layer0 in (True, False) for grid in GRID],
    lambda c: {"flavour_layer0": (c["flavour"], c["layer0"]), "intervals": (c["Kp"], c["Kr"]), "rho": c["rho"],
               **{f"step_{kind}": True for kind in schedule_kinds(c["Kp"], c["Kr"], 8)}},
    order="Kp,Kr,rho,layer0,flavour"))
def test_dllm_cache_forward_equals_reference(tiny_llada_dir, tiny_dream_dir, flavour, layer0, Kp, Kr, rho):
    model = load_model(tiny_llada_dir if flavour == "llada" else tiny_dream_dir, device="cpu")
    prompt = prompts_for(model)[0]
    P = len(prompt)
    net = PlainNetwork(model)
    ref = PlainDLLMCache(net, P, Kp, Kr, rho, layer0_always=layer0)
    fc = FeatureCache(prompt_length=P, refresh_layer0=layer0)
    cache_cfg = build_cache("dllm", prompt_interval=Kp, response_interval=Kr, verify_ratio=rho, layer0_always=layer0)
    # forwards 5 and 6 see the canvas cut after 10 answer slots (SlowFast's truncated fast phase)
    cuts = {4: P + 10, 5: P + 10}
    with torch.no_grad():
        for n, ids in enumerate(canvases(model, prompt, 8)):
            ids = ids[: cuts.get(n, ids.shape[0])]
            fc.plan(*cache_cfg.plan(n + 1))
            ours = model(ids[None], attention_mask=torch.ones(1, ids.shape[0], dtype=torch.long), cache=fc)[0]
            want = ref.forward(ids)
            torch.testing.assert_close(ours, want, atol=2e-4, rtol=1e-4, msg=f"forward {n + 1}, plan {ref.plans[-1]}")
            # what the cache holds for the response equals the reference's response caches
            for i in range(len(net.layers)):
                v_ours = fc.store[i]["v"][0].transpose(0, 1).reshape(-1, net.kv_heads * net.head_dim)
                torch.testing.assert_close(v_ours[P:], ref.response[i]["v"], atol=2e-4, rtol=1e-4)


def test_prompt_only_step_verifies_the_response_with_the_prompt(tiny_llada_dir):
    model = load_model(tiny_llada_dir, device="cpu")
    prompt = prompts_for(model)[0]
    P = len(prompt)
    seq = canvases(model, prompt, 2)
    with torch.no_grad():
        fc = FeatureCache(prompt_length=P, refresh_layer0=False)
        fc.plan(True, True)
        model(seq[0][None], cache=fc)
        attn_before = fc.store[1]["attn"][0, P:].clone()
        fc.plan(True, False, 0.25)
        model(seq[1][None], cache=fc)
    changed = (fc.store[1]["attn"][0, P:] != attn_before).any(dim=-1)
    assert int(changed.sum()) == int(G * 0.25)  # the selected response tokens were recomputed
    assert fc.recomputed_tokens == int(G * 0.25) * len(model.layers)


# ---------------------------------------------------------------- whole decodes against plain references


def reference_decode(net: PlainNetwork, prompt: list[int], rule: str, param=None, steps=None, *, refresh,
                     cached=None, block_length=BL, compat_first=False):
    """Semi-autoregressive decode of one prompt (python loops on purpose). ``refresh(x)`` is a full forward
    returning logits [S, V]; ``cached(x, lo, hi)`` the cached step returning logits of [lo, S) or None when every
    step is a full forward (dLLM-Cache). The block's first forward is a refresh."""
    mask_id = net.mask_id
    x = torch.tensor(prompt + [mask_id] * G)
    P = len(prompt)
    nfe = 0
    blocks = G // block_length
    for block in range(blocks):
        lo, hi = P + block * block_length, P + (block + 1) * block_length
        per_block = steps // blocks if steps else None
        i = 0
        while (i < per_block) if rule == "topk" else bool((x[lo:hi] == mask_id).any()):
            if cached is None or i == 0:
                logits = refresh(x)
            else:
                logits = torch.full((x.shape[0], net.head.shape[0]), float("nan"))
                span = cached(x, lo, hi)
                logits[lo: lo + span.shape[0]] = span
            logits = logits.double()
            probs = torch.softmax(logits, dim=-1)  # the mask token stays in the denominator (published rule)
            probs[:, mask_id] = -1.0  # ... but is never the prediction
            conf, x0 = probs.max(dim=-1)
            masked = [j for j in range(lo, hi) if x[j] == mask_id]
            order = sorted(masked, key=lambda j: (-conf[j].item(), j))
            c = [conf[j].item() for j in order]
            if compat_first and cached is not None and i == 0 and x[lo] == mask_id:
                order, n = [lo], 1
            elif rule == "topk":
                n = block_length // per_block + (1 if i < block_length % per_block else 0)
                n = len(order) if i == per_block - 1 else n  # the last step commits what is left
            else:  # threshold
                n = max(1, sum(v >= param for v in c))
            for j in order[:n]:
                x[j] = x0[j]
            nfe += 1
            i += 1
    return x[P:], nfe


def engine_decode(model, prompt, rule, param, steps, cache, block_length=BL):
    ids = torch.tensor([prompt])
    rule = build_rule("topk") if rule == "topk" else build_rule("threshold", threshold=param)
    return spec_generate(model, ids, torch.ones_like(ids), gen_length=G, block_length=block_length,
                         policy=build_policy("blocks", steps=steps), rule=rule, cache=cache)


RULES = [("topk", None, 8), ("threshold", 0.6, None)]


DLLM_DECODES = "flavour,rule,param,steps,Kp,Kr,rho"


@pytest.mark.parametrize(DLLM_DECODES, covering_cases(DLLM_DECODES, [
    (flavour, *rule, *kr) for flavour in ("llada", "dream") for rule in RULES
    for kr in [(2, 3, 0.25), (3, 2, 0.5), (4, 3, 0.25), (1, 4, 1.0)]],
    lambda c: {"flavour_rule": (c["flavour"], c["rule"]), "intervals": (c["Kp"], c["Kr"], c["rho"])},
    order="Kp,Kr,rho,rule,param,steps,flavour"))
def test_dllm_cache_decode_equals_reference(llada, dream, flavour, rule, param, steps, Kp, Kr, rho):
    model = llada if flavour == "llada" else dream
    net = PlainNetwork(model.model, scale=SCALE)
    cache = build_cache("dllm", prompt_interval=Kp, response_interval=Kr, verify_ratio=rho)
    for prompt in prompts_for(model):
        ref = PlainDLLMCache(net, len(prompt), Kp, Kr, rho)
        want, want_nfe = reference_decode(net, prompt, rule, param, steps, refresh=ref.forward)
        out = engine_decode(model, prompt, rule, param, steps, cache)
        assert out.tokens[0].tolist() == want.tolist()
        assert out.records[0].nfe == want_nfe


KV_DECODES = "flavour,kind,rule,param,steps,compat_first"


@pytest.mark.parametrize(KV_DECODES, covering_cases(KV_DECODES, [
    (flavour, kind, *rule, compat) for flavour in ("llada", "dream") for kind in ("prefix", "dual") for rule in RULES
    for compat in (False, True)],
    lambda c: {"flavour_kind": (c["flavour"], c["kind"]), "flavour_rule": (c["flavour"], c["rule"]),
               "kind_rule": (c["kind"], c["rule"]),
               "kind_compat": (c["kind"], c["compat_first"])},
    order="compat_first,rule,param,steps,kind,flavour"))
def test_kv_cache_decode_with_stale_kv_equals_reference(llada, dream, flavour, kind, rule, param, steps,
                                                        compat_first):
    model = llada if flavour == "llada" else dream
    net = PlainNetwork(model.model, scale=SCALE)
    cache = build_cache(kind, compat_first_token=compat_first)
    staleness = []

    def cached(x, lo, hi):
        span = ref.step(x, lo, hi if kind == "dual" else x.shape[0])
        staleness.append(float((span - net.full(x)[0][lo: lo + span.shape[0]]).abs().max()))
        return span

    for prompt in prompts_for(model):
        ref = PlainKVCache(net, dual=kind == "dual")
        want, want_nfe = reference_decode(net, prompt, rule, param, steps, refresh=ref.refresh, cached=cached,
                                          compat_first=compat_first)
        out = engine_decode(model, prompt, rule, param, steps, cache)
        assert out.tokens[0].tolist() == want.tolist()
        assert out.records[0].nfe == want_nfe
    # the cached steps really ran on stale K/V (their logits differ from a fresh full forward's)
    assert staleness and max(staleness) > 1e-3


def test_dream_cached_step_keeps_the_refresh_kv_before_the_block(tiny_dream_dir):
    """Dream computes position block_start - 1 for its shifted logit; its K/V stay as the refresh left them."""
    model = load_model(tiny_dream_dir, device="cpu")
    prompt = prompts_for(model)[2]
    P = len(prompt)
    mask_id = model.config.mask_token_id
    ids = torch.tensor([prompt + [mask_id] * G])
    ones = torch.ones_like(ids)
    s = P + BL  # the second block
    for span_end in (ids.shape[1], s + BL):  # prefix step, dual step
        with torch.no_grad():
            kv = KVCache()
            model(ids, attention_mask=ones, cache=kv)
            kept = [(k[:, :, s - 1].clone(), v[:, :, s - 1].clone()) for k, v in zip(kv.keys, kv.values)]
            ids2 = ids.clone()
            ids2[0, s: s + 3] = torch.tensor(prompt[:3])  # the block changes: fresh K/V at s - 1 would differ
            model(ids2[:, s:span_end], attention_mask=ones, cache=kv, start=s)
            _, fresh_kv = PlainNetwork(model).full(ids2[0])
        for i, ((k0, v0), k, v) in enumerate(zip(kept, kv.keys, kv.values)):
            assert torch.equal(k[:, :, s - 1], k0) and torch.equal(v[:, :, s - 1], v0)
            if i > 0:  # deeper layers' fresh K/V at s - 1 would see the changed block
                assert not torch.allclose(k0[0].reshape(-1), fresh_kv[i][0][s - 1], atol=1e-5)


# ---------------------------------------------------------------- SlowFast's truncated fast phase with dLLM-Cache


class CheckedNetwork:
    """The real network whose every forward is checked against the plain dLLM-Cache reference (batch 1)."""

    accepts_logits_range = True

    def __init__(self, model, reference: PlainDLLMCache):
        self.model, self.ref, self.config, self.tokenizer = model, reference, model.config, model.tokenizer
        self.lengths: list[int] = []

    def __call__(self, input_ids, attention_mask=None, cache=None, logits_range=None, **kw):
        out = self.model(input_ids, attention_mask=attention_mask, cache=cache, logits_range=logits_range, **kw) * SCALE
        want = self.ref.forward(input_ids[0])
        lo, hi = logits_range or (0, input_ids.shape[1])
        torch.testing.assert_close(out[0], want[lo:hi], atol=2e-3, rtol=1e-4)
        self.lengths.append(input_ids.shape[1])
        return out


SF_CACHE = dict(prompt_interval=3, response_interval=2, verify_ratio=0.25, layer0_always=False)


@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_slowfast_truncated_fast_phase_with_dllm_cache_equals_reference_per_forward(llada, dream, flavour):
    model = llada if flavour == "llada" else dream
    net = PlainNetwork(model.model, scale=SCALE)
    cut_forwards = 0
    for prompt in prompts_for(model):
        P = len(prompt)
        checked = CheckedNetwork(model.model, PlainDLLMCache(net, P, SF_CACHE["prompt_interval"],
                                                             SF_CACHE["response_interval"], SF_CACHE["verify_ratio"],
                                                             layer0_always=False))
        ids = torch.tensor([prompt])
        out = spec_generate(checked, ids, torch.ones_like(ids), gen_length=G, block_length=G,
                            policy=build_policy("slowfast", preset="code", truncate_fast=True, explore_steps=2),
                            cache=build_cache("dllm", **SF_CACHE))
        assert out.records[0].nfe == len(checked.lengths)
        cut_forwards += sum(t < P + G for t in checked.lengths)
        # forward_positions: per forward the refreshed part(s) of the (cut) canvas plus the verified tokens
        want = sum((P if rp else 0) + (t - P if rr else n)
                   for t, (rp, rr, n) in zip(checked.lengths, checked.ref.plans))
        assert out.records[0].forward_positions == want
    assert cut_forwards > 0  # the fast phase really ran on cut canvases with the cache


def test_slowfast_truncated_with_dllm_cache_batched_equals_alone(llada):
    calls = []

    class Counting:
        accepts_logits_range = True
        config, tokenizer = llada.config, llada.tokenizer

        def __call__(self, *args, **kwargs):
            calls.append(args[0].shape)
            return llada(*args, **kwargs)

    from .conftest import left_pad

    prompts = prompts_for(llada)
    kw = dict(gen_length=G, block_length=BL, policy=build_policy("slowfast", preset="code", truncate_fast=True),
              cache=build_cache("dllm", **SF_CACHE))
    ids, mask = left_pad(prompts, llada.config.pad_token_id)
    batched = spec_generate(Counting(), ids, mask, **kw)
    # some step ran rows cut at different lengths as separate forwards over one shared cache
    assert len(calls) > max(r.nfe for r in batched.records)
    for i, prompt in enumerate(prompts):
        alone = spec_generate(llada, torch.tensor([prompt]), torch.ones(1, len(prompt), dtype=torch.long), **kw)
        assert batched.tokens[i].tolist() == alone.tokens[0].tolist()
        assert batched.records[i].nfe == alone.records[0].nfe
        assert batched.records[i].forward_positions == alone.records[0].forward_positions
