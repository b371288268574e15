"""LLaDA-V's think mode appends " /think" to MathVista and MathVerse queries (lmms-eval ``think_mode``)."""

from __future__ import annotations

from dllm_bench.tasks.mathverse import MathVerse
from dllm_bench.tasks.mathvista import MathVista


def test_think_mode_appends_marker() -> None:
    doc = {"query": "Hint: answer with a number.\nQuestion: 2+2?", "query_cot": "What is 2+2?"}
    assert MathVista(think=True).prompt(doc) == doc["query"] + " /think"
    assert MathVista().prompt(doc) == doc["query"]
    assert MathVerse(think=True).prompt(doc) == doc["query_cot"] + " /think"
    assert MathVerse().prompt(doc) == doc["query_cot"]
