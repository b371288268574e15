"""GPQA on a synthetic file with GPQA's columns: seeded shuffling, extraction filters, scoring."""

from __future__ import annotations

import pytest

from dllm_bench.tasks import get_task


@pytest.fixture(scope="module")
def gpqa(fixtures_dir):
    return get_task("gpqa_main", data_files=str(fixtures_dir / "gpqa_synthetic.csv"))


def test_choices_shuffled_with_fixed_seed(gpqa, fixtures_dir):
    docs = gpqa.docs()
    again = get_task("gpqa_main", data_files=str(fixtures_dir / "gpqa_synthetic.csv")).docs()
    assert [d["choices"] for d in docs] == [d["choices"] for d in again]
    other = get_task("gpqa_main", data_files=str(fixtures_dir / "gpqa_synthetic.csv"), shuffle_seed=1).docs()
    assert [d["choices"] for d in docs] != [d["choices"] for d in other]
    assert len({d["answer"] for d in docs}) > 1
    for doc in docs:
        assert "[title]" not in doc["choices"][0] and doc["choices"][ord(doc["answer"][1]) - 65].endswith("sites")


def test_gold_correct_wrong_letter_wrong(gpqa):
    for doc in gpqa.docs():
        letter = doc["answer"]
        correct_text = doc["choices"][ord(letter[1]) - 65]
        wrong = "(A)" if letter != "(A)" else "(B)"
        for completion in (f"The answer is {letter}.", f"Reasoning... so {letter}", f"it must be {correct_text}",
                           f"Answer: {letter[1]}"):
            assert gpqa.score(completion, doc).correct, (completion, doc["sample_id"])
        assert not gpqa.score(f"The answer is {wrong}.", doc).correct
    assert gpqa.score("nothing", gpqa.docs()[0]).extracted == "[invalid]"


def test_strict_filter(fixtures_dir):
    task = get_task("gpqa_main", data_files=str(fixtures_dir / "gpqa_synthetic.csv"), filter="strict-match")
    doc = task.docs()[0]
    assert task.score(f"The answer is {doc['answer']}.", doc).correct
    assert not task.score(f"so {doc['answer']}", doc).correct


def test_prompt_never_uses_the_question_as_its_own_shot(gpqa):
    for doc in gpqa.docs():
        prompt = gpqa.prompt(doc)
        assert prompt.count(doc["Question"]) == 1 and prompt.count("Question:") == 6
