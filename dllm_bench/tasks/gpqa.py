"""GPQA (main, diamond) as lm-eval's `gpqa_*_generative_n_shot`; data only from a user-supplied file or the hub.

The GPQA authors ask that the questions never appear in plain text online: this module ships none, and
the tests use a synthetic CSV with the same columns.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from functools import lru_cache
from random import Random

from dllm_bench.tasks.base import Score, Task, register
from dllm_bench.tasks.data import STRING, TEXT, load_rows
from dllm_bench.tasks.fewshot import SeededFewshotSampler
from dllm_bench.tasks.gsm8k import FALLBACK, regex_filter

FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
DESCRIPTION = (
    "Here are some example questions from experts. Answer the final question yourself, following the format "
    "of the previous questions exactly.\n"
)
STRICT_REGEX = re.compile(r"(?<=The answer is )(.*)(?=.)")
LETTER_REGEX = re.compile(r"(\([A-Z]\))")
FILTERS = ("flexible-extract", "strict-match")


_BRACKETED = re.compile(r"\[.*?\]")


def preprocess(text: str | None, drop_brackets: bool = False) -> str:
    """lm-eval gpqa utils.preprocess: strip, ' [title]' -> '. ', double spaces -> single.

    `drop_brackets`: lm-eval 0.4.8 (the papers' version) also deletes every `[...]` span, after the strip
    (so a choice can keep a trailing space, and two choices can become identical).
    """
    if text is None:
        return " "
    text = text.strip().replace(" [title]", ". ")
    if drop_brackets:
        text = _BRACKETED.sub("", text)
    return text.replace("  ", " ")


@lru_cache(maxsize=1)
def _unicode_punctuation_table() -> dict[int, None]:
    return dict.fromkeys(i for i in range(sys.maxunicode) if unicodedata.category(chr(i)).startswith("P"))


def multi_choice_extract(completion: str, choices: list[str], longest_first: bool = True) -> str:
    """lm-eval `multi_choice_regex` (last '(X)'; else a choice's text; else ': X'), ignoring case and punctuation.

    The choice texts form one alternation: 0.4.13 orders it longest first; 0.4.8 (`longest_first=False`) in choice
    order, so where a choice's text is contained in a later one's, the earlier choice matches inside the later.
    """
    def ignore(s: str) -> str:
        return s.lower().translate(_unicode_punctuation_table())

    letters = [chr(ord("A") + i) for i in range(len(choices))]
    match = _find(LETTER_REGEX, completion, -1, {})
    if not match:
        text_to_letter = {ignore(c.strip()): f"({a})" for c, a in zip(choices, letters)}
        branches = [re.escape(ignore(c.strip())) for c in choices]
        by_text = re.compile("|".join(sorted(branches, key=len, reverse=True) if longest_first else branches))
        match = _find(by_text, ignore(completion), -1, text_to_letter)
        if not match:
            by_letter = re.compile(rf":[\s]*({'|'.join(letters)})")
            match = _find(by_letter, completion, -1, {a: f"({a})" for a in letters})
    return match or FALLBACK


def _find(regex: re.Pattern, text: str, group_select: int, convert: dict[str, str]) -> str:
    found = regex.findall(text)
    if not found:
        return ""
    match = found[group_select]
    if isinstance(match, tuple):
        groups = [m for m in match if m]
        if not groups:
            return ""
        match = groups[0]
    match = match.strip()
    return convert.get(match, match) if match else match


def normalize_letter(text: str) -> str:
    """lm-eval exact_match with ignore_case and ignore_punctuation (ASCII punctuation)."""
    return text.lower().translate(str.maketrans("", "", string.punctuation))


class GPQA(Task):
    """Generative n-shot GPQA: shuffled choices (seeded), 'Answer: (X)' shots from the same split.

    scoring=paper: lm-eval 0.4.8's preprocessing, which deletes `[...]` spans from the choices (not the
    question); the gold letter is still `choices.index(correct)`, i.e. the first copy when deletion made
    two choices identical; and its flexible filter's choice-text alternation in choice order.
    """

    name = ""  # a subset: GPQAMain, GPQADiamond
    default_num_fewshot = 5
    stop_strings = ("</s>", "Question:", "<|im_end|>")

    def __init__(self, *, filter: str = "flexible-extract", shuffle_seed: int = 0, fewshot_seed: int = 1234,
                 **cfg) -> None:
        super().__init__(**cfg)
        if filter not in FILTERS:
            raise ValueError(f"filter={filter!r}: expected one of {FILTERS}")
        self.subset, self.filter = self.name, filter  # the subset's file and hub name are the task's name
        self.shuffle_seed, self.fewshot_seed = shuffle_seed, fewshot_seed
        self._sampler: SeededFewshotSampler | None = None

    def load_all_docs(self) -> list[dict]:
        rows, _ = load_rows(
            data_files=self.config.data_files, data_dir=self.config.data_dir,
            default_names=(f"{self.subset}.csv", f"dataset/{self.subset}.csv"),
            hub_path="Idavidrein/gpqa", hub_name=self.subset, hub_split="train", required={"Question": TEXT, **{k: STRING for k in FIELDS[1:]}},
        )
        rnd = Random(self.shuffle_seed)
        drop = self.scoring == "paper"
        docs = []
        for i, r in enumerate(rows):
            choices = [preprocess(r[k], drop) for k in ("Incorrect Answer 1", "Incorrect Answer 2",
                                                        "Incorrect Answer 3", "Correct Answer")]
            rnd.shuffle(choices)
            answer = f"({chr(65 + choices.index(preprocess(r['Correct Answer'], drop)))})"
            docs.append({
                "sample_id": str(r.get("Record ID") or f"{self.subset}/{i}"), "doc_index": i,
                "Question": r["Question"], "choices": choices, "answer": answer,
            })
        return docs

    def render_question(self, doc: dict) -> str:
        c = doc["choices"]
        return f"Question: {doc['Question']}\nChoices:\n(A) {c[0]}\n(B) {c[1]}\n(C) {c[2]}\n(D) {c[3]}\nAnswer:"

    def shots(self, doc: dict) -> list[dict]:
        """Shots drawn as lm-eval draws them from the evaluated split itself (the doc is never its own shot)."""
        pool = self.all_docs()
        if self._sampler is None:
            def same(doc_index: int, pool_index: int) -> bool:
                return _content(pool[pool_index]) == _content(pool[doc_index])

            self._sampler = SeededFewshotSampler(len(pool), seed=self.fewshot_seed, same_split=True, is_eval_doc=same)
        return [pool[j] for j in self._sampler.indices(doc["doc_index"], self.num_fewshot)]

    def prompt(self, doc: dict, chat: bool = False) -> str:
        shots = "".join(f"{self.render_question(s)} {s['answer']}\n\n" for s in self.shots(doc))
        return DESCRIPTION + shots + self.render_question(doc)

    def extract(self, completion: str, doc: dict) -> str:
        if self.filter == "strict-match":
            return regex_filter(completion, STRICT_REGEX)
        return multi_choice_extract(completion, doc["choices"], self.scoring != "paper")

    def score(self, completion: str, doc: dict) -> Score:
        strict = regex_filter(completion, STRICT_REGEX)
        flexible = multi_choice_extract(completion, doc["choices"], self.scoring != "paper")
        gold = normalize_letter(doc["answer"])
        verdicts = {"strict-match": normalize_letter(strict) == gold, "flexible-extract": normalize_letter(flexible) == gold}
        return Score(correct=verdicts[self.filter], extracted=strict if self.filter == "strict-match" else flexible,
                     gold=doc["answer"], details={"filter": self.filter, "strict": strict, "flexible": flexible,
                                                  "strict_correct": verdicts["strict-match"],
                                                  "flexible_correct": verdicts["flexible-extract"]})


def _content(doc: dict) -> tuple:
    return doc["Question"], tuple(doc["choices"]), doc["answer"]


@register
class GPQAMain(GPQA):
    """GPQA's main set (448 questions)."""

    name = "gpqa_main"


@register
class GPQADiamond(GPQA):
    """GPQA's diamond set (198 questions)."""

    name = "gpqa_diamond"
