"""MATH (minerva prompt, math-verify), MathVista and MathVerse: real rows, gold correct, perturbed wrong, formats."""

from __future__ import annotations

import pytest

from dllm_bench.tasks import get_task
from dllm_bench.tasks.minerva_math import last_boxed_content

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


@pytest.fixture(scope="module")
def math500(fixtures_dir):
    return get_task("minerva_math500", data_files=str(fixtures_dir / "math" / "math500_test.jsonl"))


def test_math500_gold_solutions_correct_and_perturbed_wrong(math500):
    docs = math500.docs()
    assert docs[0]["sample_id"] == "test/precalculus/807.json"
    for doc in docs:
        assert math500.score(doc["solution"], doc).correct, doc["sample_id"]
        assert not math500.score("The final answer is $\\boxed{\\frac{1}{987654}}$.", doc).correct


@pytest.mark.parametrize("completion", [
    "so the point is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$.",
    "Final Answer: The final answer is $(3,\\frac{\\pi}{2})$. I hope it is correct.",
    "The answer is $\\boxed{(3, \\pi/2)}$",
])
def test_math_answer_formats(math500, completion):
    doc = math500.docs()[0]  # (0, 3) in polar coordinates: (3, pi/2)
    assert math500.score(completion, doc).correct


def test_full_math_gold_from_last_box(fixtures_dir):
    task = get_task("minerva_math", data_files=str(fixtures_dir / "math" / "math_test_full5000.jsonl"))
    for doc in task.docs():
        assert doc["answer"] == last_boxed_content(doc["solution"])
        assert task.score(doc["solution"], doc).correct
    assert last_boxed_content("a \\boxed{\\frac{1}{2}} then \\boxed{x^{2}}") == "x^{2}"
    assert last_boxed_content("\\boxed 5$") == "5"
    assert last_boxed_content("no box") is None


@pytest.fixture(scope="module")
def mathvista(fixtures_dir):
    return get_task("mathvista", data_dir=str(fixtures_dir / "mathvista"))


def test_mathvista_gold_correct_perturbed_wrong(mathvista):
    docs = mathvista.docs()
    assert mathvista.needs_images and docs[0]["query"].startswith("Hint:")
    for doc in docs:
        assert mathvista.score(f"The answer is {doc['answer']}.", doc).correct, doc["sample_id"]
        assert mathvista.score(f"<think>maybe 0</think>\\boxed{{{doc['answer']}}}", doc).correct
        if doc["question_type"] == "multi_choice":
            other = next(c for c in doc["choices"] if c != doc["answer"])
            assert not mathvista.score(f"The answer is {other}.", doc).correct
        elif doc["answer_type"] in ("integer", "float"):
            assert not mathvista.score(f"The answer is {float(doc['answer']) + 1}.", doc).correct


def test_mathvista_letters_precision_and_units(mathvista):
    mc = next(d for d in mathvista.docs() if d["question_type"] == "multi_choice")
    letter = "ABCDEFG"[mc["choices"].index(mc["answer"])]
    for completion in (f"({letter})", f"The answer is {letter}.", f"Answer: {letter}", f"**{letter}**"):
        assert mathvista.score(completion, mc).correct, completion
    fl = next(d for d in mathvista.docs() if d["answer_type"] == "float" and d["precision"] == 1)
    assert mathvista.score(f"about {float(fl['answer']) + 0.04:.2f} m", fl).correct  # rounded to 1 place
    assert not mathvista.score(f"about {float(fl['answer']) + 0.06:.2f} m", fl).correct
    it = next(d for d in mathvista.docs() if d["answer_type"] == "integer" and int(d["answer"]) >= 1000)
    assert mathvista.score(f"It holds {int(it['answer']):,} g.", it).correct  # thousands comma, unit


@pytest.fixture(scope="module")
def mathverse(fixtures_dir):
    return get_task("mathverse", data_dir=str(fixtures_dir / "mathverse"))


def test_mathverse_gold_correct_perturbed_wrong(mathverse):
    docs = mathverse.docs()
    assert not mathverse.needs_images  # Text-Only version
    assert mathverse.prompt(docs[0]).startswith("Please first conduct reasoning")
    for doc in docs:
        if "\n" in doc["answer"]:
            continue  # multi-answer rows (e.g. 'C\nD') need the official LLM judge
        assert mathverse.score(f"Reasoning. The answer is {doc['answer']}", doc).correct, doc["sample_id"]
        assert mathverse.score(f"\\boxed{{{doc['answer']}}}", doc).correct, doc["sample_id"]
    letter_doc = next(d for d in docs if d["answer"] in "ABCD" and len(d["answer"]) == 1)
    wrong = next(x for x in "ABCD" if x != letter_doc["answer"])
    assert not mathverse.score(f"The answer is {wrong}.", letter_doc).correct
    assert mathverse.score(f"so the correct option is ({letter_doc['answer']}).", letter_doc).correct
    free = next(d for d in docs if d["question_type"] == "free-form" and d["answer"].replace(".", "").isdigit())
    assert not mathverse.score(f"The answer is {float(free['answer']) + 3}", free).correct


def test_pluggable_judge(mathverse, mathvista):
    doc = next(d for d in mathverse.docs() if d["question_type"] == "free-form")
    judged = get_task("mathverse", data_dir=mathverse.config.data_dir, judge=lambda completion, d: d["answer"])
    assert judged.score("unparseable rambling", doc).correct
    assert not mathverse.score("unparseable rambling", doc).correct


def test_math_scoring_works_off_the_main_thread(math500):
    """math-verify's SIGALRM time limit is unavailable in threads; scoring must still work there."""
    import threading

    docs = math500.docs()[:3]
    verdicts = []
    thread = threading.Thread(target=lambda: verdicts.extend(math500.score(d["solution"], d).correct for d in docs))
    thread.start()
    thread.join()
    assert verdicts == [True, True, True]
