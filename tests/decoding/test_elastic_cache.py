"""Elastic-Cache (implemented from the paper, arXiv 2510.14973) decodes as a plain per-puzzle loop written from the
paper's description does, on the tiny LLaDA and Dream checkpoints (the first 3 or 6 held-out puzzles by default,
20 under ``-m exhaustive``; one batch in the engine):
tokens, NFE and forward positions. Properties: a threshold min_cosine that never fires is the pure cached path (no
refresh forward), one that always fires (with ``refresh_drifting_layer``) is the uncached decode bit for bit (tokens
and every step's logits), and a row of a batch decodes as it does alone.

The reference runs every layer inline, as the paper's loop does (the drift test at layer l switches the layers after
it to a full recompute from their stored inputs), in float64 on a float64 copy of the network so that no threshold
decision hinges on rounding; the engine takes the same decisions in two forwards (docs/decoding.md).
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, Sampling, build_cache, build_policy, generate
from dllm_bench.decoding.rules import build_rule
from dllm_bench.models import load_model
from dllm_bench.models.network import apply_rope
from dllm_bench.tiny.encoding import prompt_ids

ROOT = Path(__file__).resolve().parents[2]
PUZZLES = ROOT / "dllm_bench" / "tasks" / "sudoku_data" / "sudoku_test.jsonl"
GEN, BLOCK, TAU, N_PUZZLES = 24, 8, 0.9, 20


@cache
def _model(flavour: str, dtype: str):
    return load_model(ROOT / "dllm_bench" / "tiny" / "checkpoints" / f"tiny_{flavour}", device="cpu", dtype=dtype)


@cache
def _prompts(flavour: str, n: int = N_PUZZLES) -> torch.Tensor:
    rows = [json.loads(line) for line in PUZZLES.read_text().splitlines()[:n]]
    ids = [prompt_ids(_model(flavour, "float32").tokenizer, r["puzzle"]) for r in rows]
    assert len({len(p) for p in ids}) == 1  # equal lengths: no padding
    return torch.tensor(ids)


def _spec(cache_name: str = "elastic", **params) -> DecodeSpec:
    return DecodeSpec(Decoding(GEN, BLOCK, build_policy("blocks"), build_rule("threshold", threshold=TAU),
                               build_cache(cache_name, **params)), Sampling())


def _engine(flavour: str, prompts: torch.Tensor, dtype: str = "float32", **params):
    with torch.no_grad():
        out = generate(_model(flavour, dtype), prompts, None, _spec(**params))
    return out.tokens.tolist(), [r.nfe for r in out.records], [r.forward_positions for r in out.records]


# ---- the reference: one puzzle, every layer inline, written from the paper's description ----

def _attention(q, k, v):
    """Probabilities [H, n, S] and output [n, H * D] of rotated q [H, n, D] over rotated k, v [Hkv, S, D] (each
    key head serves H / Hkv consecutive query heads)."""
    k, v = (t.repeat_interleave(q.shape[0] // t.shape[0], dim=0) for t in (k, v))
    p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return p, (p @ v).transpose(0, 1).reshape(q.shape[1], -1)


def _cosine(a, b):
    """Mean over heads and tracked rows of the cosine over the keys of attention rows a, b [H, n, S]."""
    return float(((a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))).mean())


def reference_decode(model, prompt: list[int], window=16, min_cosine=0.9, track_num=1):
    """Elastic-Cache on one prompt (blocks of BLOCK, threshold TAU): answer ids, NFE, forward positions."""
    cfg = model.config
    L, P, mask = cfg.n_layers, len(prompt), cfg.mask_token_id
    shift = int(cfg.shift_logits)
    x = torch.tensor(prompt + [mask] * GEN)
    S = len(x)
    cos, sin = model._rope_tables(torch.arange(S)[None], True)
    cos, sin = cos[0], sin[0]  # [1, S, D]
    store = [dict() for _ in range(L)]  # per layer: input X [S, d], rotated Q, K [H, S, D], V
    tracked, prev_masked, nfe, positions = None, None, 0, 0
    while (x[P:] == mask).any():
        masked = x == mask
        answer_masked = masked[P:].nonzero().squeeze(1) + P
        block = int((answer_masked[0] - P) // BLOCK)
        window_pos = answer_masked[: max(window, BLOCK)].tolist()
        first = tracked is None
        if first:
            queries = list(range(S))
        else:
            new = [p for p in range(P, S) if prev_masked[p] and not masked[p]]
            extra = [p - 1 for p in window_pos] if shift else []
            queries = sorted(set(tracked) | set(new) | set(window_pos) | set(extra))
        h = model.embed(x[queries]).double()
        full_from, hidden = (0 if first else None), None  # hidden: every position's stream once full
        picks = []
        for i, blk in enumerate(model.layers):
            st = store[i]
            if full_from is not None and i >= full_from:
                if hidden is None:  # the first full layer: its stored input, the queries' rows fresh
                    hidden = h.clone() if first else st["X"].clone()
                    hidden[queries] = h
                q, k, v = (t[0] for t in blk.qkv(hidden[None]))
                st.update(X=hidden.clone(), Q=apply_rope(q[None], cos, sin)[0], K=apply_rope(k[None], cos, sin)[0], V=v)
                probs, out = _attention(st["Q"], st["K"], st["V"])
                hidden = hidden + blk.o_proj(out[None])[0]
                hidden = hidden + blk.ffn(hidden[None])[0]
                window_probs = probs[:, window_pos]
            else:
                st["X"][queries] = h
                q, k, v = (t[0] for t in blk.qkv(h[None]))
                qc, qs = cos[:, queries], sin[:, queries]
                q, k = apply_rope(q[None], qc[None], qs[None])[0], apply_rope(k[None], qc[None], qs[None])[0]
                past, _ = _attention(st["Q"][:, tracked], st["K"], st["V"])
                st["Q"][:, queries], st["K"][:, queries], st["V"][:, queries] = q, k, v
                now, _ = _attention(st["Q"][:, tracked], st["K"], st["V"])
                _, out = _attention(q, st["K"], st["V"])
                h = h + blk.o_proj(out[None])[0]
                h = h + blk.ffn(h[None])[0]
                window_probs, _ = _attention(st["Q"][:, window_pos], st["K"], st["V"])
                if full_from is None and _cosine(past, now) < min_cosine:
                    full_from = i + 1  # the paper: recompute from the next layer on
            received = window_probs.sum(dim=(0, 1)).masked_fill(masked, -1.0)
            picks += torch.topk(received, track_num).indices.tolist()
        nfe += 1
        positions += S if first else len(queries)
        if not first and full_from is not None and full_from < L:
            positions += (2 * S * (L - full_from) + L) // (2 * L)
        final = hidden if hidden is not None else None
        cand = [p for p in answer_masked.tolist() if (p - P) // BLOCK == block]
        if final is None:  # logits from the queries' streams
            index = {p: j for j, p in enumerate(queries)}
            states = torch.stack([h[index[p - shift]] for p in cand])
        else:
            states = final[[p - shift for p in cand]]
        probs = torch.softmax(model.lm_head(model.norm(states[None]))[0].double(), dim=-1)
        probs[:, mask] = -1.0  # never chosen, but in the denominator
        conf, pred = probs.max(dim=-1)
        commit = conf >= TAU
        if not commit.any():
            commit[int(conf.argmax())] = True
        prev_masked = masked
        for p, c, t in zip(cand, commit.tolist(), pred.tolist()):
            if c:
                x[p] = t
        tracked = sorted(set(picks))
    return x[P:].tolist(), nfe, positions


def _reference(flavour: str, prompts: torch.Tensor, **params):
    model = _model(flavour, "float64")
    out = [reference_decode(model, p, **params) for p in prompts.tolist()]
    return [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]


@pytest.mark.parametrize(("flavour", "min_cosine", "n"), [  # make test: the first puzzles, -m exhaustive all
    ("llada", 0.9, 6), ("dream", 0.9, 6), ("llada", 0.0, 3), ("dream", 0.0, 3),
    *(pytest.param(f, g, N_PUZZLES, marks=pytest.mark.exhaustive) for f, g in (("llada", 0.9), ("dream", 0.9),
                                                                               ("llada", 0.0), ("dream", 0.0)))])
def test_elastic_decodes_as_the_reference_loop(flavour, min_cosine, n):
    prompts = _prompts(flavour, n)
    with torch.no_grad():
        ref = _reference(flavour, prompts, min_cosine=min_cosine)
    got = _engine(flavour, prompts, "float64", min_cosine=min_cosine)
    assert got == ref


def test_a_threshold_that_never_fires_runs_no_refresh_forward():
    prompts = _prompts("llada", 3)
    calls = []
    model = _model("llada", "float32")
    hook = model.register_forward_pre_hook(lambda m, a, kw: calls.append(kw.get("query_positions") is None),
                                           with_kwargs=True)
    try:
        _, nfe, _ = _engine("llada", prompts, min_cosine=0.0)
    finally:
        hook.remove()
    assert calls[0] and not any(calls[1:]) and len(calls) == max(nfe)  # one full forward, then queries only


@pytest.mark.golden
@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_a_threshold_that_always_fires_is_the_uncached_decode_bit_for_bit(flavour):
    prompts, model = _prompts(flavour, 2), _model(flavour, "float32")
    logits = {}
    for name, params in (("none", {}), ("elastic", {"min_cosine": 2.0, "refresh_drifting_layer": True})):
        outs = []
        hook = model.register_forward_hook(lambda m, a, kw, out, outs=outs: outs.append((kw.get("query_positions"),
                                                                                          out)), with_kwargs=True)
        try:
            with torch.no_grad():
                res = generate(model, prompts, None, _spec(name, **params))
        finally:
            hook.remove()
        logits[name] = ([o for q, o in outs if q is None], res.tokens, [r.nfe for r in res.records])
    none, elastic = logits["none"], logits["elastic"]
    assert torch.equal(none[1], elastic[1]) and none[2] == elastic[2]
    assert len(none[0]) == len(elastic[0]) and all(torch.equal(a, b) for a, b in zip(none[0], elastic[0]))


@pytest.mark.golden
@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_a_row_of_a_batch_decodes_as_it_does_alone(flavour):
    prompts = _prompts(flavour, 3)
    batch = _engine(flavour, prompts)
    alone = [_engine(flavour, prompts[i: i + 1]) for i in range(len(prompts))]
    assert batch == tuple([a[k][0] for a in alone] for k in range(3))


def test_parameters_and_combinations_are_refused_in_one_line():
    for params, match in (({"min_cosine": 2.5}, r"^elastic min_cosine must be in \[0, 2\]"),
                          ({"window": 0}, r"^elastic window must be >= 1"),
                          ({"track_num": 0}, r"^elastic track_num must be >= 1")):
        with pytest.raises(ValueError, match=match):
            build_cache("elastic", **params)
    cache_ = build_cache("elastic")
    with pytest.raises(ValueError, match=r"^cache 'elastic' .* policy 'blocks'; got policy 'wino'"):
        cache_.check_combination(policy=build_policy("wino"), rule=None, gen_length=GEN, block_length=BLOCK)
    with pytest.raises(ValueError, match=r"^cache 'elastic' .* rule 'klass' reads positions beyond the block"):
        cache_.check_combination(policy=build_policy("blocks"), rule=build_rule("klass"), gen_length=GEN,
                                 block_length=BLOCK)
