"""The CPU Linear (W @ x.T from WX_MIN_ROWS rows) gives F.linear's bits, so every network output is unchanged.

Every test here lowers WX_MIN_WEIGHTS to 0, so that small layers (and the tiny checkpoints) take the W @ x.T
product too. The bits are MKL's: they hold under ATEN_CPU_CAPABILITY=default, avx2 and avx512 alike (``make
test-cpu-capabilities`` runs this file under each); another BLAS may round differently below some row count, and
MKL itself on another CPU (an Intel Xeon: issue 36), so that elsewhere than the machine the claim was measured on
(tests/fixtures/recorded_on.json, ``claim:cpu_linear_rows_product``) the products agree within tests/machine.py's
ulp bound."""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.models import cpu_linear, load_model
from dllm_bench.models.cpu_linear import WX_MIN_ROWS, Linear
from tests.machine import assert_within_ulps, recording

CHECKPOINTS = Path(__file__).resolve().parents[2] / "dllm_bench" / "tiny" / "checkpoints"
RECORDED = recording("claim:cpu_linear_rows_product")


def _assert_f_linear_values(got: torch.Tensor, want: torch.Tensor) -> None:
    """F.linear's bits where the claim was measured; elsewhere its values within the ulp bound."""
    if RECORDED.here():
        assert torch.equal(got, want)
    else:
        assert_within_ulps(got, want, "the rows product against F.linear")


@contextmanager
def _rows_product_for_every_weight(tile_rows: int | None = None):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpu_linear, "WX_MIN_WEIGHTS", 0)
        if tile_rows is not None:
            mp.setattr(cpu_linear, "WX_TILE_ROWS", tile_rows)
        yield


def _layer(d_in: int, d_out: int, bias: bool, g: torch.Generator) -> Linear:
    layer = Linear(d_in, d_out, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(d_out, d_in, generator=g) * 0.05)
        if bias:
            layer.bias.copy_(torch.randn(d_out, generator=g))
    return layer


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(12, 140), d_in=st.sampled_from([64, 96, 256, 512, 1536]),
       d_out=st.sampled_from([64, 192, 512, 1536, 4100, 9000]), bias=st.booleans(), seed=st.integers(0, 1000),
       tile_rows=st.sampled_from([None, 64, 1000]))
def test_rows_equal_f_linear_over_a_full_canvas_from_twelve_rows(rows, d_in, d_out, bias, seed, tile_rows):
    """Any 12+ rows give the bits that F.linear gives them inside a 400-row product (the published code runs
    every Linear over the whole canvas), through either of Linear's products, whole or in weight tiles (with a
    last, shorter tile)."""
    g = torch.Generator().manual_seed(seed)
    layer = _layer(d_in, d_out, bias, g)
    canvas = torch.randn(400, d_in, generator=g)
    want = F.linear(canvas, layer.weight, layer.bias)[:rows]
    with torch.no_grad(), _rows_product_for_every_weight(tile_rows):
        _assert_f_linear_values(layer(canvas[:rows]), want)
        _assert_f_linear_values(layer(canvas[:rows].view(1, rows, d_in)), want.view(1, rows, d_out))


def test_batched_and_strided_inputs_take_the_rows_product():
    """[B, T, d] inputs and a window sliced out of a batch (not contiguous) give F.linear's values."""
    g = torch.Generator().manual_seed(3)
    layer = _layer(128, 640, True, g)
    h = torch.randn(3, 40, 128, generator=g)
    window = h[:, 10:18]  # 24 rows, strided
    assert not window.is_contiguous() and window.numel() // 128 >= WX_MIN_ROWS
    with torch.no_grad(), _rows_product_for_every_weight():
        for x in (h, window):
            _assert_f_linear_values(layer(x), F.linear(x, layer.weight, layer.bias))
            assert layer(x).is_contiguous()


@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_tiny_checkpoints_give_the_logits_of_f_linear(flavour, monkeypatch):
    """A batched canvas (8 x 64 rows), a 2-row batch's window (16 rows) and a cached 8-query block of a batch
    of 2 (16 rows) through the rows product equal the same forwards with F.linear everywhere."""
    from dllm_bench.models.cache import KVCache

    model = load_model(CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype="float32")
    assert all(m.weight.is_contiguous() for m in model.modules() if isinstance(m, torch.nn.Linear))
    ids = torch.randint(0, model.config.vocab_size - 4, (8, 64), generator=torch.Generator().manual_seed(0))

    def forwards():
        kv = KVCache()
        with torch.no_grad():
            model(ids[:2], cache=kv)
            return (model(ids), model(ids[:2], logits_range=(40, 48)),
                    model(ids[:2, 40:48], cache=kv, start=40))

    monkeypatch.setattr(cpu_linear, "WX_MIN_WEIGHTS", 0)
    monkeypatch.setattr(cpu_linear, "WX_TILE_ROWS", 96)  # the LM head (512 ids) in tiles, the last one shorter
    got = forwards()
    monkeypatch.setattr(cpu_linear, "WX_MIN_ROWS", 10**9)
    want = forwards()
    for a, b in zip(got, want):
        _assert_f_linear_values(a, b)


def test_rows_above_the_cap_take_f_linear(monkeypatch):
    """Past WX_MAX_ROWS rows F.linear is as fast as W @ x.T without its transpose back, so it takes the product;
    up to the cap the rows product does (a canvas of 16 x 384 rows: up to 1.3x faster with F.linear, docs/benchmarks.md)."""
    g = torch.Generator().manual_seed(5)
    layer = _layer(64, 96, False, g)
    taken = []
    monkeypatch.setattr(cpu_linear, "rows_product", lambda x, w, b: taken.append(x.shape[0]) or F.linear(x, w, b))
    monkeypatch.setattr(cpu_linear, "WX_MIN_WEIGHTS", 0)
    cap = cpu_linear.WX_MAX_ROWS
    with torch.no_grad():
        for rows in (cap, cap + 1, 4 * cap):
            x = torch.randn(rows, 64, generator=g)
            assert torch.equal(layer(x), F.linear(x, layer.weight))
    assert taken == [cap]


@pytest.mark.parametrize("rows", range(1, 12))
def test_fewer_rows_keep_f_linear(rows):
    """Below 12 rows W @ x.T rounds differently from F.linear on this BLAS, so few rows keep F.linear's bits."""
    g = torch.Generator().manual_seed(rows)
    layer = _layer(512, 1536, False, g)
    x = torch.randn(rows, 512, generator=g)
    with torch.no_grad(), _rows_product_for_every_weight():
        assert torch.equal(layer(x), F.linear(x, layer.weight))


@pytest.mark.parametrize("bias", [False, True])
def test_rows_product_backward_gives_the_gradients_of_a_linear_map(bias):
    """With gradients on, the rows product (which writes with ``out=``, refused by autograd) trains: dx, dW and
    db equal the hand-derived gradients of y = x W^T + b, taken in float64 (dx = g W, dW = g^T x, db = sum g)."""
    g = torch.Generator().manual_seed(11)
    layer = _layer(96, 1000, bias, g)
    x = torch.randn(2, 20, 96, generator=g, requires_grad=True)  # 40 rows: the rows product's side of the switch
    upstream = torch.randn(2, 20, 1000, generator=g)
    with _rows_product_for_every_weight(tile_rows=256):
        y = layer(x)
    assert "RowsProduct" in type(y.grad_fn.next_functions[0][0]).__name__  # the rows product, not F.linear
    (y * upstream).sum().backward()
    g2, x2, w = upstream.reshape(40, 1000).double(), x.detach().reshape(40, 96).double(), layer.weight.detach().double()
    torch.testing.assert_close(x.grad.reshape(40, 96).double(), g2 @ w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.weight.grad.double(), g2.t() @ x2, rtol=1e-5, atol=1e-4)
    if bias:
        torch.testing.assert_close(layer.bias.grad.double(), g2.sum(0), rtol=1e-5, atol=1e-4)


def test_tiny_trainer_steps_through_the_rows_product(monkeypatch, tmp_path):
    """The tiny trainer's backward through every Linear on the rows product (its d_model 256, MLP 1024 layers
    take it at the real threshold; here every layer does) runs, and its loss falls over a few steps."""
    from dllm_bench.tiny.train import TrainConfig, train

    monkeypatch.setattr(cpu_linear, "WX_MIN_WEIGHTS", 0)
    cfg = TrainConfig(flavour="llada", stage1_steps=0, steps=6, d_model=64, n_layers=1, mlp_hidden_size=128,
                      batch_size=8, threads=1, log_every=1, save_every=10**6, monitor_every=10**6, lr=3e-3,
                      warmup_steps=1)
    log = train(cfg, tmp_path / "ckpt", tmp_path / "state.pt", stop_at=6)
    losses = [e["loss"] for e in log["curve"]]
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
