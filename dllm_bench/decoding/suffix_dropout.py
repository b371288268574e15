"""DPad suffix dropout: which masked positions after the current block the network sees, and the pruned canvas.

Before each block a row draws one uniform number per answer position after the block; the position at
distance d from the block's end is kept when its number falls below a Gaussian-shaped probability
``scale * N(x_d; 0, 1)`` with ``x_d`` spaced evenly over [0, sigma] across the window, and 0 beyond the window.
The network then runs on the prompt, the answer up to the block's end and the kept suffix masks, each at its
original position id (RoPE keeps the canvas positions); the dropped positions stay masked on the canvas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def keep_probability(window: int, sigma: float, scale: float, length: int, device: torch.device) -> torch.Tensor:
    """[length] float32 keep probability by distance from the block's end: the Gaussian shape over the window,
    0 after it (computed in float32 as DPad does, so a draw compares against the same values)."""
    x = torch.linspace(0.0, float(sigma), window, device=device)
    inside = scale * torch.exp(-0.5 * x**2) / torch.sqrt(torch.tensor(2 * math.pi, device=device))
    return torch.cat([inside, torch.zeros(length - window, device=device)])


class SuffixSampler:
    """Per-row kept suffix positions, redrawn when a row enters a new block.

    ``generators`` one per row: a row's own generator seeded with its seed (a batch-1 decode with seed s draws
    what DPad draws after ``torch.manual_seed(s)``), or None for torch's default generator of the device, as
    DPad's evaluation draws (seeded once per run, so a prompt's draws depend on the decodes before it).
    """

    def __init__(self, window: int, sigma: float, scale: float, gen_length: int,
                 generators: Sequence[torch.Generator | None], device: torch.device) -> None:
        self.gen_length = gen_length
        self.probability = keep_probability(window, sigma, scale, gen_length, device)
        self.device = device
        self.generators = list(generators)
        self.kept: dict[int, tuple[int, torch.Tensor]] = {}  # row -> (block end it was drawn for, answer positions)

    def update(self, rows: Sequence[int], block_hi: Sequence[int]) -> None:
        """Draw the kept positions of every row in ``rows`` whose block end changed since its last draw."""
        for r in rows:
            hi = block_hi[r]
            if r in self.kept and self.kept[r][0] == hi:
                continue
            n = self.gen_length - hi
            u = torch.rand(n, device=self.device, generator=self.generators[r])
            kept = hi + (u < self.probability[:n]).nonzero().squeeze(1)  # the block's one read: its canvas length
            self.kept[r] = (hi, kept)

    def canvas(self, rows: Sequence[int], prompt_length: int, position_ids: torch.Tensor,
               key_mask: torch.Tensor | None) -> PrunedCanvas:
        """The pruned canvas of ``rows`` (drawn by :meth:`update`); ``position_ids`` / ``key_mask`` [len(rows), T]
        are the rows' full-canvas positions and key mask (None: no padding)."""
        P = prompt_length
        lengths = [P + self.kept[r][0] + self.kept[r][1].numel() for r in rows]
        S = max(lengths)
        index = torch.arange(S, device=self.device).repeat(len(rows), 1)
        for i, r in enumerate(rows):
            hi, kept = self.kept[r]
            index[i, P + hi: lengths[i]] = P + kept
            index[i, lengths[i]:] = lengths[i] - 1  # dead columns: never attended, never read
        mask = None
        if key_mask is not None or min(lengths) < S:
            live = torch.arange(S, device=self.device).unsqueeze(0) < torch.tensor(lengths, device=self.device).unsqueeze(1)
            mask = live.long() if key_mask is None else key_mask.gather(1, index) * live.long()
        return PrunedCanvas(index, position_ids.gather(1, index), mask, S, lengths)


@dataclass
class PrunedCanvas:
    """What the network sees under suffix dropout: canvas column c of row i holds position ``index[i, c]`` (the
    identity up to the block's end, then the kept suffix positions), at position id ``position_ids[i, c]``;
    ``mask`` [b, length] keys (None = every column is live), ``lengths`` the live columns per row."""

    index: torch.Tensor
    position_ids: torch.Tensor
    mask: torch.Tensor | None
    length: int
    lengths: list[int]

    def keep_rows(self, index: list[int]) -> PrunedCanvas:
        """This canvas restricted to the rows at ``index`` (a cohort that lost rows keeps its columns)."""
        sel = torch.tensor(index, dtype=torch.long, device=self.index.device)
        return PrunedCanvas(self.index.index_select(0, sel), self.position_ids.index_select(0, sel),
                            None if self.mask is None else self.mask.index_select(0, sel), self.length,
                            [self.lengths[i] for i in index])
