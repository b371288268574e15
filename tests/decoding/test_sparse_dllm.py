"""Sparse-dLLM decodes as its published code does, and its pruning is the maths it states.

Goldens (``tests/fixtures/sparse_dllm_published.json``; how: its ``source`` field) hold, per setting and held-out
puzzle, the published decoder's answer ids and NFE on the tiny LLaDA checkpoint; by default the first puzzles of
the settings that cover every code path (published_goldens.covering_settings: one block or several, fewer steps than
tokens, pooled or raw importance; the keep ratio is a number in the same code), one batch per setting,
``-m exhaustive`` every setting on all of its puzzles. The reference test recomputes the kept
positions with plain loops.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, Sampling, build_cache, build_policy, generate
from dllm_bench.decoding.rules import build_rule
from dllm_bench.models.cache.pruned import block_importance, kept_positions

from .published_goldens import covering_settings, tiny_model
from .published_goldens import puzzle_prompts as _prompts

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "sparse_dllm_published.json").read_text())
DEFAULT_PUZZLES = 4
DEFAULT_SETTINGS = covering_settings(GOLDEN["settings"], lambda s: {
    "block": s["block_length"], "steps": s["steps"], "pooled": s["kernel_size"] is not None})


def _model():
    # float64, as the goldens: the published top-k then ranks the same probabilities (in float32 the published
    # F.softmax and our confidence differ in the last bit, which reorders near-ties)
    return tiny_model("llada", torch.float64)


def _decode(setting: dict, sample_ids: list[str]) -> list[tuple[list[int], int]]:
    batch = [_prompts()[i] for i in sample_ids]
    cache_ = build_cache("sparse_dllm", keep_ratio=setting["keep_ratio"], kernel_size=setting["kernel_size"])
    spec = DecodeSpec(Decoding(setting["gen_length"], setting["block_length"], build_policy("blocks", steps=setting["steps"]),
                               build_rule("topk"), cache_), Sampling())
    with torch.no_grad():
        out = generate(_model(), torch.tensor(batch), None, spec)
    return [(out.tokens[b].tolist(), out.records[b].nfe) for b in range(len(batch))]


def _case(i: int, setting: dict, full: bool):
    label = f"b{setting['block_length']}-s{setting['steps']}-keep{setting['keep_ratio']}-k{setting['kernel_size']}"
    return pytest.param(i, full, id=label + ("-all" if full else ""), marks=[pytest.mark.exhaustive] if full else [])


@pytest.mark.threads(GOLDEN["threads"])
@pytest.mark.parametrize(("index", "full"), [_case(i, s, f) for i, s in enumerate(GOLDEN["settings"])
                                             for f in (False, True) if f or i in DEFAULT_SETTINGS])
def test_sparse_dllm_decodes_as_its_published_code(index, full):
    setting = GOLDEN["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    got = _decode(setting, [sample_id for sample_id, _, _ in rows])
    assert got == [(ids, nfe) for _, ids, nfe in rows]


def _reference_scores(q_block, keys, kernel_size):
    """Per row, the pooled importance by plain loops: per position the head-mean of (mean query) . key, then the
    max over a centred window of kernel_size."""
    B, H, n, D = q_block.shape
    N = keys.shape[2]
    out = []
    for b in range(B):
        score = []
        for p in range(N):
            total = 0.0
            for h in range(H):
                mean_q = [sum(float(q_block[b, h, i, d]) for i in range(n)) / n for d in range(D)]
                total += sum(mean_q[d] * float(keys[b, h, p, d]) for d in range(D))
            score.append(total / H)
        if kernel_size is not None:
            half = kernel_size // 2
            score = [max(score[max(0, p - half): p + half + 1]) for p in range(N)]
        out.append(score)
    return out


@pytest.mark.parametrize(("keep_ratio", "kernel_size"), [(0.5, 3), (0.3, None), (0.7, 5), (1.0, 1)])
def test_kept_positions_are_the_top_pooled_scores(keep_ratio, kernel_size):
    g = torch.Generator().manual_seed(7)
    q_block = torch.randn(2, 2, 3, 4, generator=g, dtype=torch.float64)
    keys = torch.randn(2, 2, 17, 4, generator=g, dtype=torch.float64)
    got = kept_positions(block_importance(q_block, keys), keep_ratio, kernel_size)
    for row, score in zip(got.tolist(), _reference_scores(q_block, keys, kernel_size)):
        keep = int(len(score) * keep_ratio)
        kth = sorted(score, reverse=True)[keep - 1]
        assert len(set(row)) == keep == len(row)
        # pooling repeats values: every position above the keep-th score is kept, the rest of the kept tie with it
        assert {p for p, v in enumerate(score) if v > kth + 1e-12} <= set(row)
        assert all(score[p] >= kth - 1e-12 for p in row)
        assert [score[p] for p in row] == pytest.approx(sorted((score[p] for p in row), reverse=True))  # score order


def test_padding_ranks_last():
    importance = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0, 0.0]])
    valid = torch.tensor([[False, False, True, True, True, True]])
    assert kept_positions(importance, 0.5, None, valid).tolist() == [[2, 3, 4]]


def test_refusals_name_the_value():
    with pytest.raises(ValueError, match="keep_ratio must be in"):
        build_cache("sparse_dllm", keep_ratio=0.0)
    with pytest.raises(ValueError, match="kernel_size must be an odd integer"):
        build_cache("sparse_dllm", kernel_size=4)
    with pytest.raises(ValueError, match="policy must be 'blocks'"):
        DecodeSpec(Decoding(24, 24, build_policy("dream", steps=24), None, build_cache("sparse_dllm")))
