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


def paper_completion(raw: str, tokenizer: Any, stop_strings: Sequence[str], eos_id: int) -> tuple[str, int]:
    """(completion, tokens) as the LLaDA evaluation built them from the whole decoded answer region.

    `raw` (special tokens kept, nothing cut at the first EOS) is cut at the first stop string, re-tokenized
    with the tokenizer's own special tokens (so a BOS it adds counts), ids != EOS counted (EoT counts), and
    decoded again skipping special tokens: text a model wrote after an EOS stays in the completion.
    """
    kept = cut_at_stop_strings(raw, stop_strings)
    ids = [int(t) for t in tokenizer(kept)["input_ids"]]
    return tokenizer.decode(ids, skip_special_tokens=True), sum(1 for t in ids if t != int(eos_id))


def eos_token_id(tokenizer: Any, stop_ids: Sequence[int]) -> int:
    """The tokenizer's EOS id (the LLaDA evaluation compared with it), else the model's first stop id."""
    eos = getattr(tokenizer, "eos_token_id", None)
    return int(eos) if eos is not None else int(stop_ids[0])
