"""4x4 Sudoku with several valid answers: solution grids, puzzles, deterministic train/test splits, text format.

Pure Python + numpy (no torch): the tasks layer reads the held-out set through this module.

Why this task: the 16 answer cells constrain each other (row, column, 2x2 box), so committing two
uncertain cells in the same decoding step can produce a grid that breaks a constraint, while committing
one cell at a time lets every later cell condition on the earlier ones. Puzzles keep few random clues
(2-6 of a random grid), so most have several valid completions: the uncertainty of an open cell is
genuine (the training target is a uniformly random valid completion), not a deduction the network failed
to make in one forward, and a calibrated model shows it. Scored by validity (a valid grid keeping the clues).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import numpy as np

SIZE = 4
CELLS = SIZE * SIZE
DIGITS = "1234"
BLANK = "."
ROW_SEPARATOR = "/"
CLUE_COUNTS = (2, 3, 4, 5, 6)  # clues kept per puzzle, drawn uniformly
TEST_BUCKETS = 8  # a puzzle is held out when sha256(puzzle) % TEST_BUCKETS == 0
TEST_SET_SEED = 20240601
TEST_SET_SIZE = 500
TEST_SET_PATH = Path(__file__).parent / "sudoku_data" / "sudoku_test.jsonl"

# cell index -> (row, column, box) unit ids; box = 2x2 quadrant
_ROWS = np.arange(CELLS) // SIZE
_COLS = np.arange(CELLS) % SIZE
_BOXES = (_ROWS // 2) * 2 + _COLS // 2


@lru_cache(maxsize=1)
def solution_grids() -> np.ndarray:
    """All 288 valid 4x4 Sudoku grids as an int8 array [288, 16] of digits 1..4, in lexicographic order."""
    rows = np.array(list(itertools.permutations(range(1, SIZE + 1))), dtype=np.int8)  # [24, 4], lexicographic
    grids = rows
    for r in range(1, SIZE):
        # every partial grid followed by every row, in order, so the result stays lexicographic
        cand = np.concatenate([np.repeat(grids, len(rows), axis=0), np.tile(rows, (len(grids), 1))], axis=1)
        new, prev = cand[:, -SIZE:], cand[:, :-SIZE].reshape(len(cand), r, SIZE)
        ok = (prev != new[:, None, :]).all(axis=(1, 2))  # columns
        if r % 2 == 1:  # a band of two rows is complete: the crossed pairs of each 2x2 box must differ too
            above = prev[:, -1]
            ok &= (above[:, 0::2] != new[:, 1::2]).all(axis=1) & (above[:, 1::2] != new[:, 0::2]).all(axis=1)
        grids = cand[ok]
    return grids


def is_valid_grid(grid: np.ndarray | list[int]) -> bool:
    """True when 16 digits in 1..4 have no repeat in any row, column or 2x2 box."""
    cells = np.asarray(grid).reshape(-1)
    if cells.shape[0] != CELLS or not np.all((cells >= 1) & (cells <= SIZE)):
        return False
    for units in (_ROWS, _COLS, _BOXES):
        for unit in range(SIZE):
            if len(set(cells[units == unit].tolist())) != SIZE:
                return False
    return True


def count_solutions(puzzle: np.ndarray) -> int:
    """Number of valid grids agreeing with the clues of `puzzle` ([16] ints, 0 = blank)."""
    clues = puzzle > 0
    return int(np.all(solution_grids()[:, clues] == puzzle[clues], axis=1).sum())


def minimal_puzzle(rng: random.Random) -> tuple[np.ndarray, np.ndarray]:
    """A random (puzzle, solution) pair: remove clues in random order while the solution stays unique."""
    grids = solution_grids()
    solution = grids[rng.randrange(len(grids))]
    puzzle = solution.copy()
    order = list(range(CELLS))
    rng.shuffle(order)
    for cell in order:
        kept = puzzle[cell]
        puzzle[cell] = 0
        if count_solutions(puzzle) != 1:
            puzzle[cell] = kept
    return puzzle, solution


def completions(puzzle: np.ndarray) -> np.ndarray:
    """All valid grids agreeing with the clues of `puzzle` ([16] ints, 0 = blank), as [n, 16]."""
    clues = puzzle > 0
    grids = solution_grids()
    return grids[np.all(grids[:, clues] == puzzle[clues], axis=1)]


def agreeing_grids(known: np.ndarray) -> np.ndarray:
    """[B, 288] bool: which valid grids agree with `known` ([B, 16] ints, 0 = unknown); a row with none is stranded."""
    known = np.asarray(known)
    return ((known[:, None, :] == 0) | (solution_grids()[None] == known[:, None, :])).all(axis=-1)


def completion_marginals(known: np.ndarray) -> np.ndarray:
    """Digit marginals [B, 16, 4] of each cell under the uniform distribution over the valid grids that agree
    with `known` ([B, 16] ints, 0 = unknown): the exact posterior of an open puzzle's answer given the clues
    and the answer cells left visible. Raises ValueError when a row agrees with no valid grid."""
    agree = agreeing_grids(known)
    counts = agree.sum(axis=1)
    if not counts.all():
        bad = np.asarray(known)[int(np.argmin(counts))]
        raise ValueError(f"known cells {bad.tolist()} agree with no valid 4x4 grid")
    onehot = (solution_grids()[..., None] == np.arange(1, SIZE + 1)).astype(np.float64)  # [288, 16, 4]
    return np.einsum("bg,gcd->bcd", agree.astype(np.float64), onehot) / counts[:, None, None]


def open_puzzle(rng: random.Random) -> tuple[np.ndarray, np.ndarray]:
    """A random (puzzle, answer) pair: k in CLUE_COUNTS random clues of a random grid; answer = a uniformly
    random valid completion (so a trained model's marginals match the true spread of valid answers)."""
    grids = solution_grids()
    grid = grids[rng.randrange(len(grids))]
    puzzle = np.zeros(CELLS, dtype=np.int8)
    cells = rng.sample(range(CELLS), rng.choice(CLUE_COUNTS))
    puzzle[cells] = grid[cells]
    valid = completions(puzzle)
    return puzzle, valid[rng.randrange(len(valid))]


def puzzle_text(puzzle: np.ndarray) -> str:
    """Prompt text: four rows of digits and '.' separated by '/', e.g. '1.../..2./..../.4..'."""
    chars = "".join(BLANK if v == 0 else str(int(v)) for v in puzzle)
    return ROW_SEPARATOR.join(chars[r * SIZE:(r + 1) * SIZE] for r in range(SIZE))


def solution_text(solution: np.ndarray) -> str:
    """Answer text: the 16 digits row by row, no separators (every answer token is a cell)."""
    return "".join(str(int(v)) for v in solution)


def parse_puzzle(text: str) -> np.ndarray:
    """Inverse of `puzzle_text`; raises ValueError naming the bad text."""
    chars = text.replace(ROW_SEPARATOR, "")
    if len(chars) != CELLS or any(c not in DIGITS + BLANK for c in chars):
        raise ValueError(f"puzzle text {text!r} is not 16 cells of {DIGITS!r} or {BLANK!r} (rows split by '/')")
    return np.array([0 if c == BLANK else int(c) for c in chars], dtype=np.int8)


def is_test_puzzle(text: str) -> bool:
    """Deterministic split: a puzzle belongs to the held-out side by the hash of its text."""
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % TEST_BUCKETS == 0


PUZZLE_KINDS = {"open": open_puzzle, "minimal": minimal_puzzle}


def puzzle_stream(seed: int, split: str, kind: str = "open") -> Iterator[tuple[str, str]]:
    """Endless (puzzle_text, answer_text) pairs of one split ('train' or 'test') and kind, deterministic in seed.

    kind 'open' (the task: few clues, several valid answers) or 'minimal' (unique solution, minimal clues;
    the first training stage of the shipped models).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split {split!r} is not one of 'train', 'test'")
    if kind not in PUZZLE_KINDS:
        raise ValueError(f"puzzle kind {kind!r} is not one of {sorted(PUZZLE_KINDS)}")
    make = PUZZLE_KINDS[kind]
    rng = random.Random(seed)
    want_test = split == "test"
    while True:
        puzzle, solution = make(rng)
        text = puzzle_text(puzzle)
        if is_test_puzzle(text) == want_test:
            yield text, solution_text(solution)


def make_test_set(n: int = TEST_SET_SIZE, seed: int = TEST_SET_SEED) -> list[dict]:
    """The first n distinct held-out puzzles of the seeded test stream, as JSON-ready dicts.

    'solution' is one valid completion (a reference; any valid grid keeping the clues is correct),
    'n_solutions' how many valid completions the puzzle has.
    """
    rows: list[dict] = []
    seen: set[str] = set()
    for text, solution in puzzle_stream(seed, "test"):
        if text in seen:
            continue
        seen.add(text)
        rows.append({
            "sample_id": f"sudoku4-{len(rows):04d}",
            "puzzle": text,
            "solution": solution,
            "clues": sum(c in DIGITS for c in text),
            "n_solutions": len(completions(parse_puzzle(text))),
        })
        if len(rows) == n:
            return rows
    raise AssertionError("unreachable: the stream is endless")


def load_test_set(path: Path = TEST_SET_PATH) -> list[dict]:
    """The shipped held-out puzzles (JSONL, one dict per line)."""
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_test_set(path: Path = TEST_SET_PATH, n: int = TEST_SET_SIZE, seed: int = TEST_SET_SEED) -> None:
    """Regenerate the shipped held-out JSONL (deterministic: same seed, same file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for row in make_test_set(n, seed):
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    write_test_set()
    print(f"wrote {TEST_SET_PATH}")
