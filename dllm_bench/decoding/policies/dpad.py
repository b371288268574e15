"""DPad (Crys-Chen/DPad): LLaDA blocks whose forwards see only the suffix masks a Gaussian-shaped draw keeps
(:mod:`dllm_bench.decoding.suffix_dropout`), and an early end once a completed block holds an EOS."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.confidence import row_generators
from dllm_bench.decoding.policies.base import register, span_mask
from dllm_bench.decoding.policies.blocks import BlockPolicy, BlockState
from dllm_bench.decoding.suffix_dropout import SuffixSampler


@dataclass
class DPadState(BlockState):
    """``BlockState`` plus the rows whose block was completed by the last step, and that block's bounds."""

    completed: torch.Tensor | None = None  # [B] bool
    completed_lo: torch.Tensor | None = None  # [B] long


@register
@dataclass(frozen=True)
class DPadPolicy(BlockPolicy):
    """DPad: LLaDA blocks where each block's forwards see only the suffix masks kept by a Gaussian-shaped draw
    inside ``suffix_window`` (:mod:`dllm_bench.decoding.suffix_dropout`); None = the whole answer.

    ``early_termination``: once a block is complete and holds an EOS, the row ends and the rest of its answer
    is EOS (DPad's check, run at a block's end only). ``rng``: "row" (a generator per row from its seed) or
    "global" (torch's default generator, as DPad's evaluation draws).
    """

    suffix_window: int | None = None
    max_sd: float = 4.0
    scale: float = 2.0
    early_termination: bool = True
    rng: str = "row"
    name: ClassVar[str] = "dpad"
    sync_budget: ClassVar[int] = 4  # gen 32, block 8, batch 1: 32 reads over 8 steps, a Python value made into a tensor each step
    flavours: ClassVar[tuple[str, ...]] = ("llada",)
    caches: ClassVar[tuple[str, ...]] = ("none", "prefix", "dual")  # its published loops

    def check(self) -> None:
        """Refuse parameters its sampler cannot take (the window against gen_length: ``refuse_lengths``)."""
        super().check()
        if self.suffix_window is not None and (isinstance(self.suffix_window, bool)
                                               or not isinstance(self.suffix_window, int) or self.suffix_window < 1):
            raise ValueError(f"dpad suffix_window must be an integer >= 1 or None (the whole answer), got "
                             f"{self.suffix_window!r}")
        for key in ("max_sd", "scale"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"dpad {key} must be a number > 0, got {value!r}")
        if self.rng not in ("row", "global"):
            raise ValueError(f"dpad rng {self.rng!r} is not one of row, global")
        if not isinstance(self.early_termination, bool):
            raise ValueError(f"dpad early_termination must be true or false, got {self.early_termination!r}")

    def refuse_lengths(self, gen_length: int, block_length: int) -> str | None:
        refusal = super().refuse_lengths(gen_length, block_length)
        if refusal is None and self.suffix_window is not None and self.suffix_window > gen_length:
            return f"dpad suffix_window {self.suffix_window} is longer than gen_length {gen_length} (DPad asserts it)"
        return refusal

    def refuse_cache(self, cache: Any) -> str | None:
        if cache.name not in self.caches:
            return f"dpad runs without a cache or with prefix/dual (its published loops), got {cache.name!r}"
        return None

    def refuse_cfg(self, cfg_scale: float) -> str | None:
        if cfg_scale != 0:
            return f"dpad has no classifier-free guidance (its loops have none), got cfg_scale {cfg_scale}"
        return None

    def ends_rows_early(self) -> str | None:
        return "dpad early_termination" if self.early_termination else None

    def dropout(self, gen_length: int, seed: int | Sequence[int], batch: int, device: torch.device) -> SuffixSampler:
        # its own generators: the dropout draws never shift a sampling row's noise
        draws = row_generators(seed, batch, device) if self.rng == "row" else [None] * batch
        return SuffixSampler(self.suffix_window or gen_length, self.max_sd, self.scale, gen_length, draws, device)

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> DPadState:
        base = super().init_state(batch, gen_length, block_length, device)
        return DPadState(**{f: getattr(base, f) for f in base.__dataclass_fields__},
                         completed=torch.zeros(batch, dtype=torch.bool, device=device),
                         completed_lo=torch.zeros(batch, dtype=torch.long, device=device))

    def advance(self, state: DPadState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        before = state.block.clone()
        finished = super().advance(state, masked, active)
        state.completed = state.block != before
        state.completed_lo = before * state.block_length
        return finished

    def finished(self, state: DPadState, answer: torch.Tensor, masked: torch.Tensor, active: torch.Tensor,
                 stop_id: int | None) -> torch.Tensor:
        done = self.advance(state, masked, active)
        if self.early_termination:  # a completed block holding EOS ends the row; the rest of its answer is EOS
            done = done | (active & self.terminated(state, answer, stop_id))
        return done

    def terminated(self, state: DPadState, answer: torch.Tensor, eos_id: int) -> torch.Tensor:
        """[B] bool: rows whose block completed by the last step holds ``eos_id`` (False without early
        termination)."""
        if not self.early_termination:
            return torch.zeros_like(state.completed)
        in_block = span_mask(state.completed_lo, state.completed_lo + state.block_length, answer.shape[1])
        return state.completed & (in_block & (answer == eos_id)).any(dim=1)
