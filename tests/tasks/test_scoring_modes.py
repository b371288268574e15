"""scoring=paper (lm-eval 0.4.8, Fast-dLLM's HumanEval postprocess, raw MBPP) and scoring=lm_eval (our corrections).

Expected strings and verdicts come from lm-eval 0.4.8's own task files and Fast-dLLM's own postprocess, run
in a scratch environment (tests/fixtures/tasks/paper/, README there); none of their code is in the repo.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from dllm_bench.tasks import get_task
from dllm_bench.tasks.code_paper import longest_parsable
from dllm_bench.tasks.minerva_math import MINERVA_EXEMPLARS, PAPER_EXEMPLARS

PAPER = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "paper"
SHARED_MATH = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "math"
WORKERS = 4


@pytest.fixture(scope="module")
def ref048() -> dict:
    return json.loads((PAPER / "lm_eval_048.json").read_text())


@pytest.fixture(scope="module")
def styles() -> dict:
    return json.loads((PAPER / "code_answer_styles.json").read_text())


def test_unknown_scoring_mode_is_refused():
    with pytest.raises(ValueError, match=r"scoring='papers'.*lm_eval, paper"):
        get_task("gsm8k", scoring="papers")


# ---- paper mode: MATH ---------------------------------------------------------------------------------


def test_paper_exemplars_are_lm_eval_048s(ref048):
    assert [list(e) for e in PAPER_EXEMPLARS] == ref048["minerva_exemplars"]
    differing = [(i, j) for i in range(4) for j in range(2) if PAPER_EXEMPLARS[i][j] != MINERVA_EXEMPLARS[i][j]]
    assert differing == [(0, 0), (2, 1), (3, 0)]


def test_paper_math_prompts_byte_identical_to_048(ref048, fixtures_dir):
    math500 = get_task("minerva_math500", data_files=str(fixtures_dir / "math" / "math500_test.jsonl"),
                       scoring="paper", limit=20)
    docs = math500.docs()
    assert [math500.prompt(d) for d in docs] == ref048["minerva_math500_prompts"]
    assert [d["answer_paper"] for d in docs] == ref048["minerva_math500_answers"]
    full = get_task("minerva_math", data_files=str(fixtures_dir / "math" / "math_test_full5000.jsonl"), scoring="paper")
    assert [full.prompt(d) for d in full.docs()] == ref048["minerva_math_prompts"]
    current = get_task("minerva_math500", data_files=str(fixtures_dir / "math" / "math500_test.jsonl"), limit=20)
    assert not any(current.prompt(d) == p for d, p in zip(current.docs(), ref048["minerva_math500_prompts"]))


def _gold_verdicts(task) -> set[str]:
    """sample ids whose own reference solution the task scores wrong."""
    return {d["sample_id"] for d in task.docs() if not task.score(d["solution"], d).correct}


def test_paper_math_gold_solutions_fixed_subset_equal_048(ref048, fixtures_dir):
    """The 40 MATH-500 and 10 MATH fixture rows: the same rows fail as under 0.4.8 (and more than none do)."""
    expected = ref048["gold_solution_verdicts"]
    math500 = get_task("minerva_math500", data_files=str(fixtures_dir / "math" / "math500_test.jsonl"), scoring="paper")
    ids = {d["sample_id"] for d in math500.docs()}
    wrong = _gold_verdicts(math500)
    assert wrong == ids & set(expected["math500_test.jsonl"]["wrong"]) and wrong
    full = get_task("minerva_math", data_files=str(fixtures_dir / "math" / "math_test_full5000.jsonl"), scoring="paper")
    ids = {d["sample_id"] for d in full.docs()}
    assert _gold_verdicts(full) == ids & set(expected["math_test_full5000.jsonl"]["wrong"])


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_MATH.is_dir(), reason="the shared reference data is not beside this checkout")
@pytest.mark.parametrize("name, task_name, correct", [("math500_test.jsonl", "minerva_math500", 402),
                                                       ("math_test_full5000.jsonl", "minerva_math", 4029)])
def test_paper_math_gold_accuracy_equals_048_on_the_full_sets(ref048, name, task_name, correct):
    task = get_task(task_name, data_files=str(SHARED_MATH / name), scoring="paper")
    wrong = _gold_verdicts(task)
    assert len(task.docs()) - len(wrong) == correct == ref048["gold_solution_verdicts"][name]["correct"]
    assert wrong == set(ref048["gold_solution_verdicts"][name]["wrong"])


# ---- lm_eval mode: MATH multi-answer golds ---------------------------------------------------------------

# The 8 MATH test rows whose solution boxes several answers side by side ("$\boxed{-2}$ and $\boxed{1}$").
SET_ROWS = {
    414: ("-2", "1"), 2152: ("5 - 10i", "11", "-3 + 6i"), 2549: ("-\\tfrac32", "-\\tfrac34"),
    2703: ("3", "\\frac{2}{5}"), 2716: ("(10, 0)", "(0,0)"),
    2912: ("\\left(\\tfrac32, -\\tfrac52\\right)", "\\left(-\\tfrac52, -\\tfrac52\\right)"),
    4559: ("-1", "2"), 4860: ("\\frac{\\pi}{4}", "\\frac{5\\pi}{4}"),
}


@pytest.mark.skipif(not SHARED_MATH.is_dir(), reason="the shared reference data is not beside this checkout")
def test_lm_eval_math_multi_answer_golds_are_sets(tmp_path):
    rows = [json.loads(line) for line in (SHARED_MATH / "math_test_full5000.jsonl").read_text().splitlines()]
    picked = [rows[i] for i in SET_ROWS]
    path = tmp_path / "set_rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in picked))
    task = get_task("minerva_math", data_files=str(path))
    for doc, answers in zip(task.docs(), SET_ROWS.values()):
        both = " and ".join(f"$\\boxed{{{a}}}$" for a in answers)
        reversed_order = ", ".join(f"$\\boxed{{{a}}}$" for a in reversed(answers))
        assert task.score(doc["solution"], doc).correct, doc["sample_id"]
        assert task.score(f"The answers are {both}.", doc).correct, doc["sample_id"]
        assert task.score(f"So {reversed_order}.", doc).correct, doc["sample_id"]
        assert not task.score(f"The answer is $\\boxed{{{answers[-1]}}}$.", doc).correct, doc["sample_id"]


def test_lm_eval_math_single_answer_unchanged(fixtures_dir):
    task = get_task("minerva_math500", data_files=str(fixtures_dir / "math" / "math500_test.jsonl"))
    for doc in task.docs():
        assert task.score(f"The answer is $\\boxed{{{doc['answer']}}}$.", doc).correct, doc["sample_id"]


# ---- paper mode: GPQA -------------------------------------------------------------------------------------


def test_paper_gpqa_prompts_and_golds_equal_048():
    path = PAPER / "gpqa_synthetic_brackets.csv"
    ref = json.loads((PAPER / "lm_eval_048.json").read_text())
    paper = get_task("gpqa_main", data_files=str(path), scoring="paper")
    docs = paper.docs()
    assert [paper.prompt(d) for d in docs] == ref["gpqa_brackets_prompts"]
    assert [d["answer"] for d in docs] == ref["gpqa_brackets_answers"]
    current = get_task("gpqa_main", data_files=str(path))
    changed = [a["answer"] != b["answer"] for a, b in zip(current.docs(), docs)]
    assert sum(changed) == 2  # bracket deletion made two choices identical and choices.index took the first copy
    assert all("[" in "".join(d["choices"]) for d in current.docs()[::3])


# ---- paper mode: HumanEval and MBPP -----------------------------------------------------------------------


def test_paper_humaneval_programs_and_verdicts_equal_fast_dllm_postprocess(styles):
    cases = styles["humaneval"]
    assert len(cases) >= 30 and len({c["style"] for c in cases}) >= 10
    task = get_task("humaneval", scoring="paper", timeout_s=30, wall_timeout_s=30)
    docs = {d["sample_id"]: d for d in task.docs()}
    for c in cases:
        assert task.extract(c["answer"], docs[c["task_id"]]) == c["program"], (c["task_id"], c["style"])
    scores = task.score_many([c["answer"] for c in cases], [docs[c["task_id"]] for c in cases], workers=WORKERS)
    assert [s.correct for s in scores] == [c["passed"] for c in cases]
    assert 0 < sum(c["passed"] for c in cases) < len(cases)


def test_paper_mbpp_verdicts_equal_lm_eval_raw_pass_at_1(styles, fixtures_dir):
    cases = styles["mbpp"]
    task = get_task("mbpp", scoring="paper", data_files=str(fixtures_dir / "mbpp" / "mbpp_test.jsonl"), timeout_s=30,
                    wall_timeout_s=30)
    docs = {d["task_id"]: d for d in task.docs()}
    scores = task.score_many([c["answer"] for c in cases], [docs[c["task_id"]] for c in cases], workers=WORKERS)
    assert [s.correct for s in scores] == [c["passed"] for c in cases]
    fenced = [c for c in cases if "fenced" in c["style"]]
    assert fenced and not any(c["passed"] for c in fenced)
    ours = get_task("mbpp", data_files=str(fixtures_dir / "mbpp" / "mbpp_test.jsonl"), timeout_s=30)
    assert all(s.correct for s in ours.score_many([c["answer"] for c in fenced], [docs[c["task_id"]] for c in fenced],
                                                  workers=WORKERS))


def _brute_longest(text: str) -> str:
    """The definition: every (i, j) span, most non-blank lines, earliest first (quadratic, for checking)."""
    lines = text.splitlines()[:100]
    best, code = 0, ""
    for i in range(len(lines)):
        for j in range(i, len(lines)):
            snippet = "\n".join(lines[i : j + 1])
            try:
                ast.parse(snippet)
            except SyntaxError:
                continue
            count = sum(1 for line in lines[i : j + 1] if line.strip())
            if count > best:
                best, code = count, snippet
    return code


@pytest.mark.parametrize("text", [
    "def f():\n    return 1\n\nx = (\nprint(2)\n",
    "Here is code:\ndef f(a):\n\n    return a\n\n\nthat is all\nimport os",
    "if x:\n  y = 1\n else:\n\ndef g():\n    return 2\n    pass\n",
    "a = 1\n)\nb = 2\nc = 3\n",
    "",
])
def test_longest_parsable_equals_the_quadratic_definition(text):
    def canon(code: str) -> str:
        return ast.dump(ast.parse(code))

    assert canon(longest_parsable(text)) == canon(_brute_longest(text))


# ---- lm_eval mode: HumanEval "def line + body" ------------------------------------------------------------


def test_lm_eval_humaneval_def_line_and_body_164_of_164(load_script):
    style = load_script("scoring_modes").HUMANEVAL_STYLES["def line + body, python fence"]  # docs/tasks.md's row
    task = get_task("humaneval", timeout_s=30)
    docs = task.docs()
    answers = [style(d) for d in docs]
    scores = task.score_many(answers, docs, workers=WORKERS)
    assert [d["sample_id"] for d, s in zip(docs, scores) if not s.correct] == []
    paper = get_task("humaneval", scoring="paper", timeout_s=30, wall_timeout_s=30)
    failed = [d["sample_id"] for d, s in zip(docs, paper.score_many(answers, docs, workers=WORKERS)) if not s.correct]
    assert failed == ["HumanEval/50", "HumanEval/115"]
