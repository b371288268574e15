"""Per-sample accounting: forwards, steps, wall time, and the published token-counting rules.

Counting rules (every one is a column; ``tokens`` is the headline rule):
- ``tokens`` (LLaDA evaluation rule): decode the answer, cut at the first stop string, re-tokenize,
  count ids that are not EOS/EoT/pad.
- ``tokens_non_eos`` (Fast-dLLM++ HumanEval; Dream cells): answer ids that are not EOS, no cut.
- ``tokens_canvas_non_eos`` (Fast-dLLM June 2025 HumanEval): ids that are not EOS over prompt + answer.
- ``tokens_gen_length`` (SlowFast / dLLM-Cache Dream throughput): the full gen_length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class StepTrace:
    """One step of one row: sorted candidate confidences, commits, and the Fréchet terms of the chosen n."""

    step: int
    sorted_confidences: list[float]
    n_committed: int
    n_edited: int = 0  # committed tokens this step rewrote or re-masked (``Policy.revise``)
    frechet_core: float | None = None
    frechet_bonus: float | None = None


@dataclass
class SampleRecord:
    """Work done for one row of a ``generate`` call."""

    nfe: int  # forwards in which the row had work (refresh forwards included; a CFG pair counts once)
    steps: int  # decoding steps (commit decisions) of the row
    forward_positions: int  # query positions the network computed for the row, summed over forwards
    wall_time_s: float  # from the start of the call until the row finished (synchronised on GPU)
    edits: int = 0  # committed tokens rewritten or re-masked after their commit, summed over steps (``revise``)
    token_counts: dict[str, int] = field(default_factory=dict)
    trace: list[StepTrace] | None = None

    @property
    def tokens_per_forward(self) -> float | None:
        """Headline generated tokens per NFE (None until token counts are filled)."""
        if "tokens" not in self.token_counts or self.nfe == 0:
            return None
        return self.token_counts["tokens"] / self.nfe


def cut_at_stop_strings(text: str, stop_strings: Sequence[str]) -> str:
    """Text up to the earliest occurrence of any stop string."""
    cut = len(text)
    for stop in stop_strings:
        if stop:
            at = text.find(stop)
            if at != -1:
                cut = min(cut, at)
    return text[:cut]


def count_generated_tokens(
    answer_ids: Sequence[int] | torch.Tensor,
    tokenizer,
    stop_strings: Sequence[str],
    *,
    stop_token_ids: Sequence[int],
    pad_token_id: int | None = None,
    prompt_length: int = 0,
) -> dict[str, int]:
    """All counting rules for one answer (ids of the generated region); ``prompt_length`` = real prompt ids."""
    ids = [int(t) for t in (answer_ids.tolist() if isinstance(answer_ids, torch.Tensor) else answer_ids)]
    dropped = set(stop_token_ids) | ({pad_token_id} if pad_token_id is not None else set())
    eos = stop_token_ids[0] if stop_token_ids else None
    text = tokenizer.decode(ids, skip_special_tokens=False)
    kept = cut_at_stop_strings(text, stop_strings)
    retok = tokenizer.encode(kept, add_special_tokens=False) if kept else []
    non_eos = sum(1 for t in ids if t != eos)
    return {
        "tokens": sum(1 for t in retok if t not in dropped),
        "tokens_non_eos": non_eos,
        "tokens_canvas_non_eos": non_eos + prompt_length,
        "tokens_gen_length": len(ids),
    }
