"""Counted FLOPs of whatever a piece of code computes: every matrix product and attention it runs, by op shape.

The FLOP model of ``make bench`` (scripts/bench.py) counts a whole decode with :func:`count_flops`, so a cache's
cost is what its forwards (and its storage and session) actually compute, with nothing declared per cache: query
rows x key length per layer (SDPA or explicit ``q @ k.T`` / ``w @ v``), every projection and MLP row, the LM head
rows, and any extra product a cache runs (Sparse-dLLM's key scoring, d2Cache's attention rollout). A multiply-add
counts 2. Elementwise work (norms, softmax, RoPE) is not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch.utils.flop_counter import FlopCounterMode

T = TypeVar("T")
_aten = torch.ops.aten
LINEAR_OPS = (_aten.mm, _aten.addmm)  # every Linear (F.linear and the W @ x.T path) lands here


def _sdpa_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, out_shape: Any = None,
                **kwargs: Any) -> int:
    """q.k and weights.v of one SDPA call: 2 b H Q S (D + Dv); with grouped K/V every query head counts."""
    b, h, q, d = query_shape
    return 2 * b * h * q * key_shape[-2] * (d + value_shape[-1])


# torch's counter knows the CUDA kernels; the CPU kernel is counted by the same formula
CUSTOM = {_aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_flops}


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one counted call: in all, in Linear layers (projections, MLP, LM head) and in the LM head alone."""

    total: int
    linear: int
    head: int

    @property
    def attention(self) -> int:
        """Products between activations: q.k, weights.v, and a cache's own (key scoring, rollout)."""
        return self.total - self.linear

    @property
    def network(self) -> int:
        """All but the LM head."""
        return self.total - self.head

    def __add__(self, other: FlopCount) -> FlopCount:
        return FlopCount(self.total + other.total, self.linear + other.linear, self.head + other.head)


def count_flops(fn: Callable[[], T], head_name: str = "lm_head") -> tuple[T, FlopCount]:
    """Run ``fn()`` and count the FLOPs of every product it computes; ``head`` sums the modules named ``head_name``."""
    with FlopCounterMode(display=False, custom_mapping=CUSTOM) as mode:
        out = fn()
    counts = mode.get_flop_counts()
    everything = counts.get("Global", {})
    linear = sum(int(everything.get(op, 0)) for op in LINEAR_OPS)
    head = sum(int(n) for name, ops in counts.items() if name.split(".")[-1] == head_name for n in ops.values())
    return out, FlopCount(int(mode.get_total_flops()), linear, head)
