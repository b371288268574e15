"""From answer-region token ids to completion text, and the runner's names for the token-count rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dllm_bench.decoding.accounting import cut_at_stop_strings

# runner count_rule -> the decoding engine's token-count key (docs/decoding.md); samples.jsonl has tokens_<rule>
COUNT_KEYS = {"cut": "tokens", "nonstop": "tokens_non_eos", "canvas": "tokens_canvas_non_eos",
              "all": "tokens_gen_length"}


def completion_texts(ids: Sequence[int], tokenizer: Any, stop_ids: Sequence[int],
                     stop_strings: Sequence[str]) -> tuple[str, str]:
    """(completion, raw): text decoded up to the first stop id and cut at the first stop string; full text."""
    ids = [int(i) for i in ids]
    stops = {int(s) for s in stop_ids}
    end = next((k for k, t in enumerate(ids) if t in stops), len(ids))
    raw = tokenizer.decode(ids, skip_special_tokens=False)
    return cut_at_stop_strings(tokenizer.decode(ids[:end], skip_special_tokens=False), stop_strings), raw
