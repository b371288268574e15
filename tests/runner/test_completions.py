"""Completion texts and token counts of both scoring modes, against a reference of the LLaDA evaluation loop."""

from __future__ import annotations

import pytest

from dllm_bench.runner.completions import completion_texts, eos_token_id, paper_completion
from dllm_bench.runner.config import compute_run_id
from dllm_bench.runner.summary import count_column
from dllm_bench.runner.validate import ConfigError, build_task

pytestmark = pytest.mark.fast  # the inner loop: make test-fast

BOS, EOS, EOT = 1, 2, 3
SPECIAL = {BOS: "<s>", EOS: "<eos>", EOT: "<eot>"}


class WordTokenizer:
    """Space-separated words; adds a BOS when called (as LLaDA's tokenizer does); specials are words too."""

    eos_token_id = EOS

    def __init__(self):
        self.vocab = {v: k for k, v in SPECIAL.items()}

    def _id(self, word: str) -> int:
        return self.vocab.setdefault(word, len(self.vocab) + 10)

    def __call__(self, text: str) -> dict:
        return {"input_ids": [BOS] + [self._id(w) for w in text.split()]}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        words = {v: k for k, v in self.vocab.items()}
        return " ".join(words[i] for i in ids if not (skip_special_tokens and i in SPECIAL))


def llada_reference(ids: list[int], tok: WordTokenizer, stops: list[str]) -> tuple[str, int]:
    """The LLaDA evaluation's loop, written out: split at each stop string in turn, count re-tokenized ids != EOS."""
    text = tok.decode(ids, skip_special_tokens=False)
    for stop in stops:
        if stop in text:
            text = text.split(stop)[0]
    again = tok(text)["input_ids"]
    return tok.decode(again, skip_special_tokens=True), sum(1 for t in again if t != EOS)


@pytest.mark.parametrize("words, stops", [
    ("a b <eot> <eos> c d <eos> <eos>", ["Question:"]),
    ("a b Question: c <eos> d", ["Question:", "<eot>"]),
    ("x <eos> y <eot> Problem: z", ["Problem:", "y"]),
    ("<eos> <eos> <eos>", []),
])
def test_paper_completion_equals_the_llada_loop(words, stops):
    tok = WordTokenizer()
    ids = tok(words)["input_ids"][1:]
    lm_eval, raw = completion_texts(ids, tok, (EOS, EOT), stops)
    assert raw == words  # the whole region, special tokens kept
    text, tokens = paper_completion(raw, tok, stops, eos_token_id(tok, (EOS, EOT)))
    assert (text, tokens) == llada_reference(ids, tok, stops)
    assert "<eos>" not in text and "<eot>" not in text


def test_text_after_eos_and_what_counts():
    tok = WordTokenizer()
    ids = tok("a b <eot> <eos> c d")["input_ids"][1:]
    lm_eval, raw = completion_texts(ids, tok, (EOS, EOT), [])
    text, tokens = paper_completion(raw, tok, [], EOS)
    assert lm_eval == "a b" and text == "a b c d"
    assert tokens == 6  # BOS, a, b, EoT, c, d: the EOS is the only id not counted


def test_count_column_and_run_id_record_the_mode():
    assert count_column("cut", "paper") == "tokens_cut_paper"
    assert count_column("cut", "lm_eval") == "tokens_cut" and count_column("all", "paper") == "tokens_all"
    base = {"policy": {"name": "blocks"}, "rule": {"name": "topk"}, "cache": {"name": "none"}, "task": {"name": "gsm8k"}}
    lm_eval = {**base, "task": {"name": "gsm8k", "scoring": "lm_eval"}}
    paper = {**base, "task": {"name": "gsm8k", "scoring": "paper"}}
    assert compute_run_id(lm_eval) == compute_run_id(base)  # ids from before the key existed stay valid
    assert compute_run_id(paper).startswith("blocks-topk-none-paper-") and compute_run_id(paper) != compute_run_id(base)


def test_bad_scoring_in_a_config_is_one_line():
    with pytest.raises(ConfigError, match=r"scoring='lm-eval': expected one of lm_eval, paper"):
        build_task({"name": "gsm8k", "scoring": "lm-eval"})
