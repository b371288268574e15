"""What the runner asks of a decoding engine: `Engine` (bound to one model) and the per-row `Generation`.

Kept apart from `execute` (which drives an engine) and `engine` (which implements one) so neither imports the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dllm_bench.runner.run_config import RunConfig
from dllm_bench.runner.sharding import DistContext


@dataclass
class Generation:
    """What the engine returns per row: answer-region ids and how they were counted (a served engine's NFE and
    steps are None where its server reports none)."""

    ids: list[int]
    nfe: int | None
    steps: int | None
    token_counts: dict[str, int]  # the decoding engine's counting rules (COUNT_KEYS values)
    decode_time_s: float = math.nan  # from the start of the generate call until this row finished
    forward_positions: int | None = 0
    edits: int | None = 0  # committed tokens rewritten or re-masked after their commit (None: a server reports none)
    trace: dict[str, Any] | None = None


EngineFactory = Callable[[RunConfig, DistContext], "Engine"]


class Engine:
    """Interface of a decoding engine bound to a model (see dllm_bench.runner.engine)."""

    tokenizer: Any
    stop_token_ids: tuple[int, ...]
    device_name: str

    def prepare(self, prompts: list[str], docs: list[dict], seeds: list[int]) -> dict[str, Any]:
        """Untimed per-batch work (e.g. the oracle's reference decode); extra arguments for `generate`."""
        return {}

    def compile_seconds(self) -> float | None:
        """Seconds spent so far compiling the network (model.compile); None where nothing is compiled."""
        return None

    def generate(self, prompts: list[str], docs: list[dict], seeds: list[int], stop_strings: tuple[str, ...],
                 **extra: Any) -> list[Generation]:
        raise NotImplementedError
