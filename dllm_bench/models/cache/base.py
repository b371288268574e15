"""What a cache's storage is to the network: the ``Storage`` protocol :meth:`DiffusionLM.forward` drives.

A storage only stores and merges tensors; *when* to refresh what, and which positions a forward computes, is the
decoding cache's decision (:mod:`dllm_bench.decoding.caches`). It runs the network's own
:class:`~dllm_bench.models.network.Block` pieces, so a cached forward is the uncached computation restricted to
fewer positions. One storage per file in this package.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from ..network import Block, LayerContext


@runtime_checkable
class Storage(Protocol):
    """Per-layer state of a cached decode, as the network sees it.

    A forward calls :meth:`begin` once with the tokens it computes, then :meth:`run_layer` for every layer in
    order; the queries are the canvas span ``[start, start + T)`` or, with ``positions`` [B, Q] (ascending per
    row), those canvas positions (``ctx.index`` in every layer).
    """

    length: int  # canvas length of the stored state (0 before the first forward)

    def begin(self, input_ids: torch.Tensor, start: int, canvas_length: int, read_only: int = 0,
              positions: torch.Tensor | None = None) -> None:
        """Start a forward over ``input_ids`` [B, T]; its first ``read_only`` positions keep their stored state."""

    def run_layer(self, i: int, block: Block, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        """Layer ``i``'s output residual stream for the queries' stream ``h``."""

    def token_ids(self, lo: int, hi: int) -> torch.Tensor:
        """Stored canvas tokens [B, hi - lo] (Dream's span forward needs position start-1's token)."""

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop batch rows (``rows`` = indices to keep)."""
