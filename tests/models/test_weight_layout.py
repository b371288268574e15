"""The CPU weight layout (every Linear weight stored with its transpose contiguous) changes strides only."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.models import load_model
from dllm_bench.models.network import store_linear_weights_transposed

CHECKPOINTS = Path(__file__).resolve().parents[2] / "dllm_bench" / "tiny" / "checkpoints"


def _checkpoint_layout(model: torch.nn.Module) -> torch.nn.Module:
    for sub in model.modules():
        if isinstance(sub, torch.nn.Linear):
            sub.weight.data = sub.weight.data.contiguous()
    return model


def test_cpu_load_stores_linear_weights_transposed_with_the_same_values_and_names():
    model = load_model(CHECKPOINTS / "tiny_llada", device="cpu", dtype="float32")
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.t().is_contiguous() and not m.weight.is_contiguous() for m in linears)
    plain = _checkpoint_layout(load_model(CHECKPOINTS / "tiny_llada", device="cpu", dtype="float32"))
    got, want = model.state_dict(), plain.state_dict()
    assert list(got) == list(want)
    assert all(torch.equal(got[k], want[k]) and got[k].shape == want[k].shape for k in want)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(12, 80), d_in=st.sampled_from([64, 96, 256, 512]), d_out=st.sampled_from([64, 192, 256, 1536]),
       bias=st.booleans(), seed=st.integers(0, 1000))
def test_linear_is_bit_identical_from_twelve_rows(rows, d_in, d_out, bias, seed):
    g = torch.Generator().manual_seed(seed)
    layer = torch.nn.Linear(d_in, d_out, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(d_out, d_in, generator=g))
    x = torch.randn(rows, d_in, generator=g)
    before = F.linear(x, layer.weight, layer.bias)
    store_linear_weights_transposed(layer)
    assert layer.weight.t().is_contiguous()
    assert torch.equal(F.linear(x, layer.weight, layer.bias), before)


def test_tiny_checkpoints_give_identical_logits_in_both_layouts():
    """A batched canvas (8 rows x 64 positions) and a cached 8-query block of a batch of 2 (16 rows)."""
    for flavour in ("llada", "dream"):
        model = load_model(CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype="float32")
        plain = _checkpoint_layout(load_model(CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype="float32"))
        ids = torch.randint(0, model.config.vocab_size - 4, (8, 64), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            assert torch.equal(model(ids), plain(ids))
            assert torch.equal(model(ids[:2], logits_range=(40, 48)), plain(ids[:2], logits_range=(40, 48)))
