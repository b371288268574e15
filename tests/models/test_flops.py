"""The FLOP model of `make bench` (dllm_bench.models.flops.count_flops over a whole decode) against FLOPs computed
by hand from each cache's schedule on a small random LLaDA-shaped network (d 64, 2 layers, MLP 256).

Per layer and forward, q query rows against S keys cost q * (8 d^2 + 6 d m) in the projections and the MLP and
4 q S d in q.k and weights.v; the LM head is left out (its rows are the engine's candidates, not the cache's).
Prompt 8 + answer 16 in blocks of 8, 4 fixed top-k steps per block (2 tokens a step), batch 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, build_cache, build_policy, build_rule, generate
from dllm_bench.models.flops import count_flops
from dllm_bench.models.random_weights import random_network

P, G, BLOCK, STEPS = 8, 16, 8, 8
T = P + G
LLADA_CONFIG = (Path(__file__).resolve().parents[2] / "dllm_bench" / "models" / "reference_configs"
                / "llada-8b-instruct" / "config.json")
D, M, LAYERS, VOCAB = 64, 256, 2, 512


@pytest.fixture(scope="module")
def model():
    raw = json.loads(LLADA_CONFIG.read_text())  # the real 8B keys, small sizes (as scripts/bench.py builds them)
    raw.update(d_model=D, n_layers=LAYERS, n_heads=4, n_kv_heads=4, mlp_hidden_size=M, embedding_size=VOCAB,
               vocab_size=VOCAB, mask_token_id=VOCAB - 1, eos_token_id=VOCAB - 2, pad_token_id=VOCAB - 2,
               bos_token_id=VOCAB - 3)
    return random_network(raw, "flops-test", torch.device("cpu"), torch.float32)


def rows(q: int, s: int) -> int:
    """One layer: q query rows through projections and MLP, attending over s keys."""
    return q * (8 * D * D + 6 * D * M) + 4 * q * s * D


def full(q: int = T, s: int = T) -> int:
    return LAYERS * rows(q, s)


class Shapes:
    """The network wrapped to record each call's query count (per-row positions or span)."""

    accepts_logits_range = True
    accepts_logits_at = True

    def __init__(self, model):
        self.model, self.config, self.queries = model, model.config, []

    def __call__(self, input_ids, **kwargs):
        self.queries.append(input_ids.shape[1])
        return self.model(input_ids, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def decode_flops(model, cache: str, **params):
    ids = torch.randint(0, VOCAB - 8, (1, P), generator=torch.Generator().manual_seed(0))
    net = Shapes(model)
    decoding = Decoding(G, BLOCK, build_policy("blocks", steps=STEPS), build_rule("topk"), build_cache(cache, **params))
    with torch.no_grad():
        out, flops = count_flops(lambda: generate(net, ids, None, DecodeSpec(decoding)))
    assert out.records[0].nfe == STEPS
    return flops, net.queries


@pytest.mark.parametrize("cache, expected", [
    ("none", [full()] * 8),
    # a full forward at each block start, then [block start, canvas end) against all 24 keys
    ("prefix", [full(), *[full(16)] * 3, full(), *[full(8)] * 3]),
    ("dual", [full(), *[full(8)] * 3, full(), *[full(8)] * 3]),
    # steps 0 and 1 of a block full; then the positions masked when the previous step began (16-2 = 14, 12;
    # in block 2: 6, 4) against all keys
    ("dkv", [full(), full(), full(14), full(12), full(), full(), full(6), full(4)]),
])
def test_kv_caches_count_query_rows_times_keys(model, cache, expected):
    flops, _ = decode_flops(model, cache)
    assert flops.network == sum(expected)


def test_sparse_dllm_counts_its_pruned_keys_and_key_scoring(model):
    # per block: a full forward, a full forward that scores the 16 keys outside the block by (mean block query).key
    # (2 * 16 * d per layer), then the block's 8 queries against 8 of its own + int(16 * 0.5) kept keys
    block = [full(), full() + LAYERS * 2 * 16 * D, full(8, 16), full(8, 16)]
    flops, _ = decode_flops(model, "sparse_dllm")
    assert flops.network == 2 * sum(block)


def test_dllm_cache_counts_refreshes_and_v_verify(model):
    # K_p 100, K_r 6, rho 0.25: forward 1 full; forward 7 the response (16 rows); the others V-verify: fresh V of the
    # 16 response rows (2 * 16 * d^2) and int(16 * 0.25) = 4 rows recomputed; layer 0 is full every forward
    verify = rows(T, T) + 2 * 16 * D * D + rows(4, T)
    expected = [full(), *[verify] * 5, rows(T, T) + rows(16, T), verify]
    flops, _ = decode_flops(model, "dllm")
    assert flops.network == sum(expected)


def test_d2cache_counts_its_per_row_queries_and_rollout(model):
    # each forward's queries (the plan's per-row positions; batch 1: the call's width) against all 24 keys, plus the
    # attention rollout's T x T product from the second layer on, and on every step after the first the certainty
    # density's [1, 3G] x [3G, G] product; the head over the 16 answer positions that gives its first-step
    # confidence is an LM head call, left out with the head
    flops, queries = decode_flops(model, "d2cache")
    assert queries[0] == T and all(q < T for q in queries[1:])
    rollout = (LAYERS - 1) * 2 * T ** 3
    density = 2 * 3 * G * G
    assert flops.network == sum(full(q) + rollout for q in queries) + (len(queries) - 1) * density


def test_head_and_linear_split(model):
    x = torch.randint(0, VOCAB - 8, (2, T))
    with torch.no_grad():
        _, flops = count_flops(lambda: model(x))
    head = 2 * (2 * T) * D * VOCAB
    assert flops.head == head and flops.total == 2 * full() + head
    assert flops.attention == 2 * LAYERS * 4 * T * T * D and flops.linear == flops.total - flops.attention
