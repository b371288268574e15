"""Golden cases of the sudoku task's extraction and scoring, and its registration."""

import pytest

from dllm_bench.tasks import get_task
from dllm_bench.tasks.sudoku import SudokuTask

DOC = {"sample_id": "g", "puzzle": "..12/..../2.3./.4..", "solution": "4312124321343421"}


@pytest.mark.parametrize("completion, correct, details", [
    ("4312124321343421<|eot_id|><|endoftext|><|endoftext|>", True, (True, True, True)),
    ("4312124321343421<|im_end|><|endoftext|>", True, (True, True, True)),
    ("4312/1243/2134/3421", True, (True, True, True)),
    # a valid grid that ignores the clues (digit-swapped solution)
    ("4321214312343412<|eot_id|>", False, (True, True, False)),
    # keeps the clues but repeats a digit in a row and a column
    ("4312124321343431<|eot_id|>", False, (True, False, True)),
    ("431212432134342<|eot_id|>1", False, (False, False, False)),
    ("4312124321343421 extra", False, (False, False, False)),
    ("<|eot_id|>4312124321343421", False, (False, False, False)),
])
def test_score_golden_cases(completion, correct, details):
    score = SudokuTask().score(completion, DOC)
    assert score.correct is correct
    assert (score.details["well_formed"], score.details["valid"], score.details["keeps_clues"]) == details
    assert score.gold == DOC["solution"]


def test_registry_and_shipped_docs():
    task = get_task("sudoku", limit=5)
    docs = task.docs()
    assert len(docs) == 5 and len(SudokuTask().docs()) == 500
    assert task.prompt(docs[0]) == docs[0]["puzzle"]
    assert task.score(docs[0]["solution"], docs[0]).correct


def test_fewshot_refused():
    with pytest.raises(ValueError, match="num_fewshot=2"):
        SudokuTask(num_fewshot=2)


def test_any_valid_completion_counts_not_only_the_reference():
    # '1.../..2./..../...3' has exactly three valid completions; the row stores one of them
    doc = {"sample_id": "open", "puzzle": "1.../..2./..../...3", "solution": "1234342143122143"}
    task = SudokuTask()
    for other in ("1234432131422413", "1234432134122143"):
        score = task.score(other + "<|eot_id|>", doc)
        assert score.correct and score.extracted == other and score.gold == doc["solution"]
    # a valid grid that breaks the clue in the last cell
    broken = task.score("1234342121434312<|eot_id|>", doc)
    assert not broken.correct and broken.details["valid"] and not broken.details["keeps_clues"]
