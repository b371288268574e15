"""MathVista testmini: the official query prompts; rule-based extraction and normalisation by default.

The official scorer extracts answers with an LLM; here the rules below do it, and a `judge` callable
(completion, doc) -> answer text can replace them. Images are referenced by path (`image`) for the
multimodal runner; this task needs them, so text-only models are refused by the runner.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from dllm_bench.tasks.answer_extract import (
    Judge,
    answer_span,
    choice_letter,
    clean_answer,
    last_number,
    levenshtein,
    strip_thinking,
)
from dllm_bench.tasks.base import Score, Task, register
from dllm_bench.tasks.data import DataError, check_fields, load_hub_rows, read_rows, resolve_local

FIELDS = ("pid", "question", "answer", "question_type", "answer_type")


@register
class MathVista(Task):
    """MathVista testmini (1000): multi_choice answers mapped to choice text, free_form with type and precision."""

    name = "mathvista"
    default_num_fewshot = 0
    stop_strings = ()
    needs_images = True

    def __init__(self, *, judge: Judge | None = None, image_root: str | None = None, think: bool = False,
                 **cfg) -> None:
        super().__init__(**cfg)
        if self.num_fewshot != 0:
            raise ValueError(f"num_fewshot={self.num_fewshot}: mathvista is evaluated 0-shot")
        self.judge, self.image_root, self.think = judge, image_root, think

    def load_all_docs(self) -> list[dict]:
        local = resolve_local(self.config.data_files, self.config.data_dir, ("testmini.json",))
        if local is None:
            rows, source = load_hub_rows("AI4Math/MathVista", None, "testmini"), "hub:AI4Math/MathVista[testmini]"
        else:
            rows, source = read_rows(local), str(local)
            queries = Path(local).with_name("query.json")
            if queries.is_file() and rows and "query" not in rows[0]:
                by_pid = _read_queries(queries)
                rows = [{**r, "query": by_pid.get(str(r.get("pid")))} for r in rows]
        rows = check_fields(rows, (*FIELDS, "query"), source)
        docs = []
        for r in rows:
            image = r.get("image")
            if self.image_root and isinstance(image, str):
                image = str(Path(self.image_root) / image)
            docs.append({
                "sample_id": f"mathvista/{r['pid']}", "doc_index": len(docs), "pid": str(r["pid"]),
                "query": r["query"], "question": r["question"], "choices": r.get("choices"),
                "unit": r.get("unit"), "precision": r.get("precision"), "answer": str(r["answer"]),
                "question_type": r["question_type"], "answer_type": r["answer_type"], "image": image,
            })
        return docs

    def prompt(self, doc: dict, chat: bool = False) -> str:
        """The official query; LLaDA-V's think mode appends " /think" (lmms-eval ``think_mode``)."""
        return doc["query"] + (" /think" if self.think else "")

    def extract(self, completion: str, doc: dict) -> str | None:
        """Normalised answer: choice text for multi_choice; int, rounded float or list string for free_form."""
        raw = self.judge(completion, doc) if self.judge else answer_span(completion)
        return normalize_mathvista(raw, doc, strip_thinking(completion))

    def score(self, completion: str, doc: dict) -> Score:
        pred = self.extract(completion, doc)
        return Score(correct=pred is not None and pred == doc["answer"], extracted=pred, gold=doc["answer"],
                     details={"question_type": doc["question_type"], "answer_type": doc["answer_type"]})


def _read_queries(path: Path) -> dict[str, str]:
    """query.json: pid -> the official prompt (hint + question + choices)."""
    with open(path, encoding="utf-8") as f:
        obj = json.load(f)
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected an object mapping pid to the query string")
    return obj


def normalize_mathvista(raw: str, doc: dict, full_text: str) -> str | None:
    """MathVista's `normalize_extracted_answer`: letters/texts to a choice; numbers by answer type."""
    text = clean_answer(raw)
    if doc["question_type"] == "multi_choice":
        choices = [str(c) for c in doc["choices"] or []]
        if not choices:
            return None
        if text in choices:
            return text
        letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(choices)]
        letter = choice_letter(text, letters, choices) or choice_letter(full_text, letters, choices)
        if letter is not None:
            return choices[letters.index(letter)]
        return min(choices, key=lambda c: levenshtein(text, c)) if text else None
    if doc["answer_type"] == "list":
        return re.sub(r"\s*,\s*", ", ", text) if text.startswith("[") else None
    number = last_number(text) or last_number(full_text)
    if number is None:
        return None
    try:
        value = float(number)
    except ValueError:
        return None
    if doc["answer_type"] == "integer":
        return str(int(value))
    if doc["answer_type"] == "float":
        return str(round(value, int(doc["precision"] or 0)))
    return number
