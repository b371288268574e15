"""The networks' ``Linear``: ``nn.Linear`` with a faster float32 product on the CPU, same values.

MKL's float32 GEMM is 1.2-2.2x faster with the rows as its short side: the 16-96 rows of a cached step, or an
LM head over a block. So on the CPU, from ``WX_MIN_ROWS`` to ``WX_MAX_ROWS`` rows and for weights of
``WX_MIN_WEIGHTS``+ entries, the product is taken as (W @ x.T).T: the rows padded to a multiple of 8 (up to 2x
faster than 31 rows), and a weight with many output features (an LM head) in tiles of ``WX_TILE_ROWS`` that stay in
cache, another 10-20 % (docs/benchmarks.md). Past ``WX_MAX_ROWS`` (a batch's whole canvas) ``F.linear`` is as fast
as the product alone, and the transpose back would cost up to 30 % more. Every other device, dtype, row count or
weight size takes ``F.linear`` untouched.

Exactness, where it holds: on this machine's BLAS (MKL 2024.2, whose kernels ATEN_CPU_CAPABILITY does not
change) 12+ rows give ``F.linear``'s bits (tests/models/test_linear.py, tests/test_cpu_capabilities.py); below
that the two orders round differently, hence ``WX_MIN_ROWS``. Another BLAS may round differently; the values
agree to float32 rounding everywhere.

The product is autograd-safe: with gradients on, it runs inside :class:`_RowsProduct`, whose backward is the
ordinary one of a linear map (the tiny trainer trains through it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# the CPU float32 product is taken as W @ x.T from this many rows up to that many, for weights of this many entries,
# in tiles of this many output features for large weights
WX_MIN_ROWS = 16
WX_MAX_ROWS = 512
WX_MIN_WEIGHTS = 512 * 512
WX_TILE_ROWS = 4096


class Linear(nn.Linear):
    """``nn.Linear`` whose CPU float32 product at ``WX_MIN_ROWS``-``WX_MAX_ROWS`` rows is taken as (W @ x.T).T
    (module doc)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if (x.device.type != "cpu" or x.dtype != torch.float32 or weight.numel() < WX_MIN_WEIGHTS
                or torch.compiler.is_compiling()):  # a compiled graph: the compiler picks the product
            return F.linear(x, weight, bias)
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if rows < WX_MIN_ROWS or rows > WX_MAX_ROWS:
            return F.linear(x, weight, bias)
        x2 = x.reshape(rows, x.shape[-1])
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad)):
            out = _RowsProduct.apply(x2, weight, bias)
        else:
            out = rows_product(x2, weight, bias)
        return out.view(*x.shape[:-1], weight.shape[0])


def rows_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, d] @ W.T (+ b) as a contiguous [M, F], computed as W @ x.T on rows padded to a multiple of 8, in
    weight tiles of ``WX_TILE_ROWS`` output features for weights of 2 tiles or more. No autograd (``out=``)."""
    rows = x.shape[0]
    padded = -(-rows // 8) * 8  # at other row counts MKL takes up to twice as long (31 rows vs 32)
    if padded != rows:
        x = torch.cat([x, x.new_zeros(padded - rows, x.shape[1])])
    xt = x.contiguous().t()
    features = weight.shape[0]
    tile = WX_TILE_ROWS if features >= 2 * WX_TILE_ROWS else features
    out = x.new_empty(features, padded)
    for i in range(0, features, tile):
        sl = slice(i, i + tile)
        if bias is None:
            torch.mm(weight[sl], xt, out=out[sl])
        else:
            torch.addmm(bias[sl, None], weight[sl], xt, out=out[sl])
    return _transpose(out)[:rows]


def _transpose(out: torch.Tensor) -> torch.Tensor:
    """[F, M] -> contiguous [M, F]. For a few rows a 3-D permuted copy (which runs on every thread) is up to 2x
    faster than the 2-D transpose copy (which runs on one): 1.0 vs 2.1 ms for an LM head at 16 rows."""
    features, rows = out.shape
    if rows > 64 or features % 16:
        return out.t().contiguous()
    flipped = out.new_empty(rows, features)
    flipped.view(rows, features // 16, 16).copy_(out.view(features // 16, 16, rows).permute(2, 0, 1))
    return flipped


class _RowsProduct(torch.autograd.Function):
    """:func:`rows_product` with the gradients of y = x W^T + b: dx = g W, dW = g^T x, db = sum of g's rows."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return rows_product(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        return (grad.mm(weight) if need_x else None,
                grad.t().mm(x) if need_w else None,
                grad.sum(0) if ctx.has_bias and need_b else None)
