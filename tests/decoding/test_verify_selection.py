"""dLLM-Cache V-verify's row choice (``least_similar_rows``) is a function of the values, not of the CPU's SIMD width.

The float32 ``F.cosine_similarity`` of an unchanged row is 1 give or take an ulp that depends on the reduction's
vector width (ATEN_CPU_CAPABILITY), and ``torch.topk`` on the CPU breaks ties in no stated order, so the
published ranking picked different rows on AVX2 and AVX-512 kernels (issue 31). Here: an independent reference
(correctly rounded sums), unchanged rows and the published ranking behind ``compat``; the same choice under every
capability this CPU has: tests/test_cpu_capabilities.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.models import load_model
from dllm_bench.models.cache import FeatureCache, least_similar_rows

pytestmark = pytest.mark.golden  # bit equality between code paths: checked under every kernel width


def reference(new: torch.Tensor, cached: torch.Tensor, n: int) -> list[list[int]]:
    """a.b / sqrt(|a|^2 |b|^2) from correctly rounded float64 sums, rounded to float32; lowest first, ties by
    position; the chosen positions ascending."""
    out = []
    for a_rows, b_rows in zip(new.double().tolist(), cached.double().tolist()):
        sims = []
        for a, b in zip(a_rows, b_rows):
            dot = math.fsum(x * y for x, y in zip(a, b))
            a2, b2 = math.fsum(x * x for x in a), math.fsum(y * y for y in b)
            sims.append(float(np.float32(dot / max(math.sqrt(a2 * b2), 1e-16))))
        order = sorted(range(len(sims)), key=lambda j: (sims[j], j))
        out.append(sorted(order[:n]))
    return out


def near_ties(b: int, r: int, f: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cached V and fresh V where a third of the rows are unchanged, a third moved by an ulp or so and the rest
    moved a little: the shape of a verify step on a decode that has settled."""
    g = torch.Generator().manual_seed(seed)
    cached = torch.randn(b, r, f, generator=g)
    new = cached.clone()
    kind = torch.randint(0, 3, (b, r), generator=g)
    ulp = cached * torch.randint(-2, 3, (b, r, f), generator=g) * 2.0**-23
    new = torch.where((kind == 1).unsqueeze(-1), cached + ulp, new)
    new = torch.where((kind == 2).unsqueeze(-1), cached + 0.05 * torch.randn(b, r, f, generator=g), new)
    return new, cached


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 3), r=st.integers(1, 24), f=st.sampled_from([1, 8, 64, 96]), seed=st.integers(0, 10_000),
       frac=st.floats(0.0, 1.0))
def test_least_similar_rows_equal_the_reference(b, r, f, seed, frac):
    new, cached = near_ties(b, r, f, seed)
    n = int(r * frac)
    got = least_similar_rows(new, cached, n)
    assert got.shape == (b, n) and got.dtype == torch.int64
    assert got.tolist() == reference(new, cached, n)


def test_unchanged_rows_are_exactly_one_and_go_by_position():
    """Rows 1, 3, 4 and 6 moved; n = 6 takes them and then the two lowest unchanged positions, 0 and 2, on any
    values (float32 cosine gives an unchanged row 1 - 1 ulp, 1 or 1 + 1 ulp depending on its entries)."""
    g = torch.Generator().manual_seed(0)
    cached = torch.randn(1, 8, 40, generator=g) * torch.logspace(-3, 3, 8).view(1, 8, 1)
    new = cached.clone()
    for j in (1, 3, 4, 6):
        new[0, j] += 0.1 * torch.randn(40, generator=g) * cached[0, j].abs().mean()
    assert least_similar_rows(new, cached, 6).tolist() == [[0, 1, 2, 3, 4, 6]]
    assert least_similar_rows(new, cached, 4).tolist() == [[1, 3, 4, 6]]


def test_compat_is_the_published_ranking():
    """``compat``: ``torch.topk`` of ``F.cosine_similarity`` in the inputs' dtype (here bfloat16, as on a GPU), in
    ``torch.topk``'s order, least similar first: the published hook gathers the rows in that order, and the CPU
    attention kernel can round a query by its place among the queries (issue 44)."""
    g = torch.Generator().manual_seed(1)
    cached = torch.randn(2, 16, 32, generator=g).bfloat16()
    new = (cached.float() + torch.rand(2, 16, 1, generator=g) * torch.randn(2, 16, 32, generator=g)).bfloat16()
    sim = F.cosine_similarity(new, cached, dim=-1)
    want = torch.topk(sim, 5, dim=-1, largest=False).indices
    got = least_similar_rows(new, cached, 5, compat=True)
    assert torch.equal(got, want)
    assert (sim.gather(1, got).diff(dim=-1) >= 0).all() and not torch.equal(got, got.sort(dim=-1).values)


def test_compat_takes_the_published_products(tiny_dream_dir):
    """``verify_compat``: the picked response rows keep their V from the whole response's V product, their q and k
    come from a product of those rows alone, and the prompt's q, k, v (on a prompt refresh) from one of the prompt
    alone, bit for bit (a small product may round differently from the same rows inside a larger one)."""
    block = load_model(tiny_dream_dir, device="cpu").layers[0]
    g = torch.Generator().manual_seed(4)
    p, r = 5, 11
    h = torch.randn(2, p + r, block.attn_norm.weight.shape[0], generator=g)
    fc = FeatureCache(prompt_length=p, verify_compat=True)
    v_new = block.value(h[:, p:])
    picked = torch.tensor([[p + 1, p + 4, p + 9], [p, p + 2, p + 10]])
    for with_prompt in (False, True):
        selected = torch.cat([torch.arange(p).expand(2, -1), picked], dim=1) if with_prompt else picked
        q, k, v = fc._published_qkv(block, h, v_new, selected, with_prompt)
        rows = h.gather(1, picked[..., None].expand(-1, -1, h.shape[-1]))
        q_rows, k_rows, _ = block.qkv(rows)
        v_rows = torch.stack([v_new[b, :, picked[b] - p] for b in range(2)])
        parts = [block.qkv(h[:, :p])] if with_prompt else []
        want = [torch.cat([*(x[i] for x in parts), y], dim=2) for i, y in enumerate((q_rows, k_rows, v_rows))]
        assert all(torch.equal(got, w) for got, w in zip((q, k, v), want))
