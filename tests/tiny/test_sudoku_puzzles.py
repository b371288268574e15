"""The 4x4 Sudoku generator: grids, open and minimal puzzles, deterministic splits, the shipped test set."""

import random

import numpy as np
import pytest

from dllm_bench.tasks import sudoku_puzzles as sp


def test_there_are_288_distinct_valid_grids():
    grids = sp.solution_grids()
    assert grids.shape == (288, 16)
    assert len({g.tobytes() for g in grids}) == 288
    assert all(sp.is_valid_grid(g) for g in grids)


@pytest.mark.parametrize("bad", [
    [1, 2, 3, 4, 3, 4, 1, 2, 2, 1, 4, 3, 4, 3, 2, 2],  # repeat in the last row
    [1, 2, 3, 4, 2, 1, 4, 3, 3, 4, 1, 2, 4, 3, 2, 1],  # rows and columns fine, top-left box has 1,2,2,1
    [1, 2, 3, 4] * 3 + [4, 3, 2],                      # 15 cells
    [0, 2, 3, 4, 3, 4, 1, 2, 2, 1, 4, 3, 4, 3, 2, 1],  # a blank
])
def test_invalid_grids_are_rejected(bad):
    assert not sp.is_valid_grid(bad)


def test_minimal_puzzles_have_one_solution_and_no_removable_clue():
    rng = random.Random(7)
    for _ in range(30):
        puzzle, solution = sp.minimal_puzzle(rng)
        assert sp.count_solutions(puzzle) == 1
        clues = puzzle > 0
        assert np.all(puzzle[clues] == solution[clues])
        for cell in np.flatnonzero(clues):
            fewer = puzzle.copy()
            fewer[cell] = 0
            assert sp.count_solutions(fewer) > 1


def test_open_puzzles_keep_few_clues_and_answer_with_a_valid_completion():
    rng = random.Random(11)
    n_solutions = []
    for _ in range(60):
        puzzle, answer = sp.open_puzzle(rng)
        clues = puzzle > 0
        assert int(clues.sum()) in sp.CLUE_COUNTS
        assert sp.is_valid_grid(answer) and np.all(answer[clues] == puzzle[clues])
        valid = sp.completions(puzzle)
        assert len(valid) == sp.count_solutions(puzzle) >= 1
        assert any(np.array_equal(answer, g) for g in valid)
        n_solutions.append(len(valid))
    assert sum(n > 1 for n in n_solutions) > len(n_solutions) // 2  # most puzzles have several valid answers


def test_open_puzzle_answers_spread_over_the_valid_completions():
    # the answer is a random completion: its rank among the (lexicographic) completions varies
    rng = random.Random(5)
    ranks = []
    for _ in range(300):
        puzzle, answer = sp.open_puzzle(rng)
        valid = sp.completions(puzzle)
        if len(valid) >= 4:
            ranks.append(int(np.flatnonzero((valid == answer).all(axis=1))[0]) / (len(valid) - 1))
    assert len(ranks) > 50
    assert 0.35 < float(np.mean(ranks)) < 0.65 and min(ranks) < 0.1 and max(ranks) > 0.9


def test_text_round_trip_and_bad_text():
    puzzle, _ = sp.minimal_puzzle(random.Random(1))
    text = sp.puzzle_text(puzzle)
    assert len(text) == 19 and text.count("/") == 3
    assert np.array_equal(sp.parse_puzzle(text), puzzle)
    with pytest.raises(ValueError, match="not 16 cells"):
        sp.parse_puzzle("1234/5...")


def test_streams_are_deterministic_and_splits_disjoint():
    take = lambda seed, split: [next(s) for s in [sp.puzzle_stream(seed, split)] for _ in range(200)]  # noqa: E731
    assert take(3, "train") == take(3, "train")
    assert take(3, "train") != take(4, "train")
    assert all(not sp.is_test_puzzle(p) for p, _ in take(3, "train"))
    assert all(sp.is_test_puzzle(p) for p, _ in take(3, "test"))
    with pytest.raises(ValueError, match="split 'dev'"):
        next(sp.puzzle_stream(0, "dev"))
    with pytest.raises(ValueError, match="puzzle kind 'hard'"):
        next(sp.puzzle_stream(0, "train", "hard"))
    minimal = [next(s) for s in [sp.puzzle_stream(3, "train", "minimal")] for _ in range(20)]
    assert all(sp.count_solutions(sp.parse_puzzle(p)) == 1 for p, _ in minimal)


def test_shipped_test_set_is_the_seeded_generator_output():
    shipped = sp.load_test_set()
    assert len(shipped) == sp.TEST_SET_SIZE >= 500
    assert shipped == sp.make_test_set()
    assert len({r["puzzle"] for r in shipped}) == len(shipped)
    assert len({r["sample_id"] for r in shipped}) == len(shipped)
    for row in shipped[:50]:
        puzzle = sp.parse_puzzle(row["puzzle"])
        assert row["n_solutions"] == sp.count_solutions(puzzle)
        assert row["solution"] in {sp.solution_text(g) for g in sp.completions(puzzle)}


def test_completion_marginals_match_enumeration_and_refuse_impossible_rows():
    puzzle = sp.parse_puzzle("12../..../..../....")
    marg = sp.completion_marginals(puzzle[None])
    valid = sp.completions(puzzle)
    for cell in range(sp.CELLS):
        assert np.allclose(marg[0, cell], [(valid[:, cell] == d).mean() for d in range(1, 5)])
    assert np.allclose(marg.sum(-1), 1.0)
    with pytest.raises(ValueError, match="agree with no valid 4x4 grid"):
        sp.completion_marginals(sp.parse_puzzle("11../..../..../....")[None])
