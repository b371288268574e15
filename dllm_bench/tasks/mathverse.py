"""MathVerse testmini: official CoT (or direct) queries; rule-based extraction, math-verify for free-form answers.

The official scorer uses an LLM for extraction and judging; a `judge` callable (completion, doc) -> answer
text can replace the extraction rules. The Text-Only version needs no images; the vision versions do.
"""

from __future__ import annotations

from pathlib import Path

from dllm_bench.tasks.answer_extract import Judge, answer_span, choice_letter, clean_answer, strip_thinking
from dllm_bench.tasks.base import Score, Task, register
from dllm_bench.tasks.data import check_fields, load_hub_rows, read_rows, resolve_local

FIELDS = ("sample_index", "question", "answer", "question_type", "query_wo", "query_cot")
PROMPT_FIELDS = ("query_cot", "query_wo")
TEXT_ONLY = "Text Only"


@register
class MathVerse(Task):
    """MathVerse testmini: multi-choice by option letter, free-form by math-verify equivalence."""

    name = "mathverse"
    default_num_fewshot = 0
    stop_strings = ()

    def __init__(self, *, prompt_field: str = "query_cot", version: str | None = None, judge: Judge | None = None,
                 image_root: str | None = None, think: bool = False, **cfg) -> None:
        super().__init__(**cfg)
        self.think = think
        if prompt_field not in PROMPT_FIELDS:
            raise ValueError(f"prompt_field={prompt_field!r}: expected one of {PROMPT_FIELDS}")
        if self.num_fewshot != 0:
            raise ValueError(f"num_fewshot={self.num_fewshot}: mathverse is evaluated 0-shot")
        self.prompt_field, self.version, self.judge, self.image_root = prompt_field, version, judge, image_root

    @property
    def needs_images(self) -> bool:  # type: ignore[override]
        """Only the Text-Only version can be answered without the figure."""
        return any(d["problem_version"] != TEXT_ONLY for d in self.all_docs())

    def load_all_docs(self) -> list[dict]:
        local = resolve_local(self.config.data_files, self.config.data_dir,
                              ("testmini_text_only.json", "testmini.json"))
        if local is None:
            rows, source = load_hub_rows("AI4Math/MathVerse", "testmini", "testmini"), "hub:AI4Math/MathVerse[testmini]"
        else:
            rows, source = read_rows(local), str(local)
        rows = check_fields(rows, FIELDS, source)
        docs = []
        for r in rows:
            version = r.get("problem_version") or TEXT_ONLY
            if self.version is not None and version != self.version:
                continue
            image = r.get("image") or None
            if image and self.image_root:
                image = str(Path(self.image_root) / image)
            docs.append({
                "sample_id": f"mathverse/{r['sample_index']}", "doc_index": len(docs),
                "question": r["question"], "answer": str(r["answer"]), "question_type": r["question_type"],
                "problem_version": version, "query_wo": r["query_wo"], "query_cot": r["query_cot"], "image": image,
            })
        return docs

    def prompt(self, doc: dict, chat: bool = False) -> str:
        """The chosen query field; LLaDA-V's think mode appends " /think" (lmms-eval ``think_mode``)."""
        return doc[self.prompt_field] + (" /think" if self.think else "")

    def extract(self, completion: str, doc: dict) -> str | None:
        """Option letter when the gold is a letter; otherwise the cleaned final-answer text."""
        raw = self.judge(completion, doc) if self.judge else answer_span(completion)
        if _letter_answer(doc):
            return choice_letter(clean_answer(raw), "ABCDEFGH") or choice_letter(strip_thinking(completion), "ABCDEFGH")
        text = clean_answer(raw)
        return text or None

    def score(self, completion: str, doc: dict) -> Score:
        pred = self.extract(completion, doc)
        gold = doc["answer"]
        if pred is None:
            correct = False
        elif _letter_answer(doc):
            correct = pred == gold.strip().upper()
        else:
            correct = _same_text(pred, gold) or _math_equal(pred, gold)
        return Score(correct=correct, extracted=pred, gold=gold, details={"question_type": doc["question_type"]})


def _letter_answer(doc: dict) -> bool:
    """Multi-choice rows whose gold is an option letter (a few have a value such as 'False' instead)."""
    gold = doc["answer"].strip().upper()
    return doc["question_type"] == "multi-choice" and len(gold) == 1 and gold in "ABCDEFGH"


def _same_text(a: str, b: str) -> bool:
    return "".join(clean_answer(a).split()).lower() == "".join(clean_answer(b).split()).lower()


def _math_equal(pred: str, gold: str) -> bool:
    import threading

    from math_verify import parse, verify

    limit = 5 if threading.current_thread() is threading.main_thread() else None  # SIGALRM: main thread only
    g, p = parse(f"${gold}$", parsing_timeout=limit), parse(f"${pred}$", parsing_timeout=limit)
    return bool(g and p and verify(g, p, timeout_seconds=limit))
