"""d2Cache decodes as its published code does, and its choices are the maths they state.

Goldens (``tests/fixtures/d2cache_published.json``; how: its ``source`` field) hold, per setting and held-out puzzle,
the published decoder's answer ids and NFE on the tiny LLaDA and Dream checkpoints (certainty-prior decoding with and without
d2Cache, semi-AR with inflation, threshold); each puzzle is decoded alone, as published (batch 1). The first puzzles
of every setting run by default, ``-m exhaustive`` all of them. The reference tests recompute the density, the
nucleus, the inflation and the rollout with plain loops.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, Sampling, build_cache, build_policy, generate
from dllm_bench.decoding.caches.d2cache import inflate, nucleus, query_positions
from dllm_bench.decoding.rules import build_rule
from dllm_bench.decoding.rules.certainty_prior import certainty_density
from dllm_bench.models import load_model
from dllm_bench.models.cache.rollout import rollout_step
from dllm_bench.tiny.encoding import prompt_ids

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "d2cache_published.json").read_text())
GOLDEN_DREAM = json.loads((ROOT / "tests" / "fixtures" / "d2cache_dream_published.json").read_text())
PUZZLES = ROOT / "dllm_bench" / "tasks" / "sudoku_data" / "sudoku_test.jsonl"
DEFAULT_PUZZLES = 2


@cache
def _model(name: str = "tiny_llada"):
    return load_model(ROOT / "dllm_bench" / "tiny" / "checkpoints" / name, device="cpu")


@cache
def _prompts(name: str = "tiny_llada") -> dict[str, list[int]]:
    rows = [json.loads(line) for line in PUZZLES.read_text().splitlines()]
    return {r["sample_id"]: prompt_ids(_model(name).tokenizer, r["puzzle"]) for r in rows}


def _spec(setting: dict) -> DecodeSpec:
    G = setting["gen_length"]
    if setting.get("threshold") is not None:
        policy, rule = build_policy("blocks"), build_rule("threshold", tau=setting["threshold"])
    elif setting.get("sigma"):
        policy, rule = build_policy("blocks", steps=G), build_rule("certainty_prior", sigma=setting["sigma"])
    else:
        policy, rule = build_policy("blocks", steps=G), build_rule("topk")
    cache_ = build_cache("none") if setting["cache"] is None else build_cache("d2cache", **setting["cache"])
    return DecodeSpec(Decoding(G, setting["block_length"], policy, rule, cache_), Sampling())


def _decode(setting: dict, sample_id: str, name: str = "tiny_llada") -> tuple[list[int], int]:
    with torch.no_grad():
        out = generate(_model(name), torch.tensor([_prompts(name)[sample_id]]), None, _spec(setting))
    return out.tokens[0].tolist(), out.records[0].nfe


def _label(setting: dict) -> str:
    c = setting["cache"]
    cache_part = "nocache" if c is None else f"k{c['current_k']}-p{c['rollout_p']}-s{c['sigma']}-w{c['inflate_w']}"
    return f"b{setting['block_length']}-sigma{setting.get('sigma')}-tau{setting.get('threshold')}-{cache_part}"


def _case(name: str, i: int, setting: dict, full: bool):
    return pytest.param(name, i, full, id=f"{name}-{_label(setting)}" + ("-all" if full else ""),
                        marks=[pytest.mark.exhaustive] if full else [])


@pytest.mark.parametrize(("name", "index", "full"), [
    _case(name, i, s, f) for name, golden in (("tiny_llada", GOLDEN), ("tiny_dream", GOLDEN_DREAM))
    for i, s in enumerate(golden["settings"]) for f in (False, True)])
def test_d2cache_decodes_as_its_published_code(name, index, full):
    setting = (GOLDEN if name == "tiny_llada" else GOLDEN_DREAM)["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    assert [_decode(setting, sample_id, name) for sample_id, _, _ in rows] == [(ids, nfe) for _, ids, nfe in rows]


def test_certainty_density_is_the_padded_gaussian_average():
    g = torch.Generator().manual_seed(3)
    decoded = torch.rand(3, 11, generator=g) < 0.5
    decoded[0, -1] = True
    decoded[1, -1] = False
    sigma = 2.5
    got = certainty_density(decoded, sigma)
    G = decoded.shape[1]
    mass = sum(math.exp(-d * d / (2 * sigma * sigma)) for d in range(-3 * G, 3 * G))
    for b in range(3):
        for i in range(G):
            total = 0.0
            for j in range(-G, 2 * G):
                value = 1.0 if j < 0 else float(decoded[b, min(j, G - 1)])
                total += math.exp(-(i - j) ** 2 / (2 * sigma * sigma)) * value
            assert got[b, i].item() == pytest.approx(total / mass, rel=1e-6)


def test_nucleus_takes_the_smallest_head_of_the_eligible_share():
    importance = torch.tensor([[4.0, 3.0, 2.0, 1.0, 10.0]])
    eligible = torch.tensor([[True, True, True, True, False]])
    assert nucleus(importance, 0.75, eligible).tolist() == [[True, True, False, False, False]]  # 0.4 + 0.3
    assert nucleus(importance, 0.1, eligible).tolist() == [[True, False, False, False, False]]  # at least one


def test_inflate_fills_short_gaps_only():
    chosen = torch.tensor([[1, 0, 0, 1, 0, 0, 0, 0, 1, 0]], dtype=torch.bool)
    want = [[1, 1, 1, 1, 0, 0, 0, 0, 1, 0]]  # gap 1..2 (width 3) filled; 4..7 (width 5) not; 9 has no right end
    assert inflate(chosen, 3).long().tolist() == want


def test_rollout_step_is_the_normalised_product():
    g = torch.Generator().manual_seed(5)
    T = 5
    attention = torch.softmax(torch.randn(1, 2, T, generator=g, dtype=torch.float64), dim=-1)
    queries = torch.tensor([[1, 3]])
    before = torch.softmax(torch.randn(1, T, T, generator=g, dtype=torch.float64), dim=-1)
    got = rollout_step(before, attention, queries)[0]
    rows = [[float(i == j) for j in range(T)] for i in range(T)]
    for n, q in enumerate(queries[0].tolist()):
        rows[q] = attention[0, n].tolist()
    mixed = [[rows[i][j] + float(i == j) for j in range(T)] for i in range(T)]
    mixed = [[v / sum(r) for v in r] for r in mixed]
    want = [[sum(mixed[i][k] * float(before[0, k, j]) for k in range(T)) for j in range(T)] for i in range(T)]
    assert [v for row in got.tolist() for v in row] == pytest.approx([v for row in want for v in row])


def test_rows_with_fewer_queries_repeat_their_last():
    query = torch.tensor([[0, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 1]], dtype=torch.bool)
    positions, counts = query_positions(query, torch.zeros(2, 6), torch.zeros(2, 3), torch.ones(2, 6, dtype=torch.bool),
                                        top_up=False)
    assert positions.tolist() == [[1, 3, 4], [0, 5, 5]] and counts.tolist() == [3, 2]


def test_refusals_name_the_value():
    with pytest.raises(ValueError, match="current_k must be >= 1"):
        build_cache("d2cache", current_k=0)
    with pytest.raises(ValueError, match="policy must be 'blocks'"):
        DecodeSpec(Decoding(24, 24, build_policy("dream", steps=24), None, build_cache("d2cache")))
    with pytest.raises(ValueError, match="certainty_prior sigma must be > 0"):
        build_rule("certainty_prior", sigma=0.0)


def test_rows_of_a_batch_decode_as_alone():
    """Rows finish at different steps (threshold rule) and leave the cohort; each row's decode is its own."""
    setting = GOLDEN["settings"][5]
    rows = setting["puzzles"][:3]
    with torch.no_grad():
        out = generate(_model(), torch.tensor([_prompts()[sid] for sid, _, _ in rows]), None, _spec(setting))
    assert [(out.tokens[b].tolist(), out.records[b].nfe) for b in range(3)] == [(ids, nfe) for _, ids, nfe in rows]
