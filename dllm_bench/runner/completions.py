"""From answer-region token ids to completion text and the three token counts of docs/runner.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Completion:
    """One row's answer: text before the first stop string, the untouched text, and token counts."""

    text: str
    raw_text: str
    tokens_cut: int
    tokens_nonstop: int
    tokens_all: int


def cut_at_stop(text: str, stop_strings: Sequence[str]) -> str:
    """`text` up to the earliest occurrence of any stop string."""
    end = len(text)
    for stop in stop_strings:
        i = text.find(stop)
        if stop and 0 <= i < end:
            end = i
    return text[:end]


def make_completion(ids: Sequence[int], tokenizer: Any, stop_ids: Sequence[int],
                    stop_strings: Sequence[str]) -> Completion:
    """Decode up to the first stop id, cut at stop strings, and count tokens by each rule.

    cut: re-tokenized cut text, ids that are not stop ids (LLaDA tasks); nonstop: generated ids that are
    not stop ids, no cut (HumanEval rule); all: the whole answer region (Dream / SlowFast rule).
    """
    ids = [int(i) for i in ids]
    stops = set(int(s) for s in stop_ids)
    end = next((k for k, t in enumerate(ids) if t in stops), len(ids))
    raw = tokenizer.decode(ids, skip_special_tokens=False)
    text = cut_at_stop(tokenizer.decode(ids[:end], skip_special_tokens=False), stop_strings)
    recount = tokenizer.encode(text, add_special_tokens=False) if text else []
    return Completion(
        text=text,
        raw_text=raw,
        tokens_cut=sum(1 for t in recount if t not in stops),
        tokens_nonstop=sum(1 for t in ids if t not in stops),
        tokens_all=len(ids),
    )
