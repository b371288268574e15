"""4x4 Sudoku, the embedded tiny models' task: the prompt is the puzzle, the answer the 16 digits.

Scored by validity: a completion is correct when its 16 digits form a valid grid that keeps every clue.
Most puzzles have several valid completions; the row's 'solution' is one of them (a reference only).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dllm_bench.tasks.base import Score, Task, register
from dllm_bench.tasks.data import Field, check_fields, read_rows
from dllm_bench.tasks.sudoku_puzzles import (
    CELLS,
    DIGITS,
    ROW_SEPARATOR,
    TEST_SET_PATH,
    is_valid_grid,
    parse_puzzle,
)


def _is_puzzle(value: object) -> bool:
    try:
        return isinstance(value, str) and parse_puzzle(value) is not None
    except ValueError:
        return False


ROW_SCHEMA = {
    "puzzle": Field(_is_puzzle, f"a string of {CELLS} cells of {DIGITS!r} or '.', rows split by "
                                f"{ROW_SEPARATOR!r} ('1.../..2./..../.4..')"),
    "solution": Field(lambda v: isinstance(v, str) and len(v) == CELLS and all(c in DIGITS for c in v),
                      f"a string of {CELLS} digits of {DIGITS!r}"),
}
# end-of-answer markers of the tiny LLaDA (<|eot_id|>, <|endoftext|>) and tiny Dream (<|im_end|>) tokenizers
SUDOKU_STOP_STRINGS = ("<|eot_id|>", "<|endoftext|>", "<|im_end|>")


@register
class SudokuTask(Task):
    """The 500 shipped held-out 4x4 puzzles (or `data_files` in the same JSONL format)."""

    name = "sudoku"
    default_num_fewshot = 0
    stop_strings = SUDOKU_STOP_STRINGS

    def __init__(self, **cfg: Any) -> None:
        super().__init__(**cfg)
        if self.num_fewshot:
            raise ValueError(f"num_fewshot={self.num_fewshot}: sudoku is zero-shot only; allowed: 0")

    def load_all_docs(self) -> list[dict]:
        """Rows {sample_id, puzzle, solution, clues, n_solutions} from the shipped JSONL or `data_files`."""
        path = self.config.data_files or TEST_SET_PATH
        rows = check_fields(read_rows(path), ROW_SCHEMA, str(path))
        for i, row in enumerate(rows):
            row.setdefault("sample_id", f"sudoku4-{i:04d}")
        return rows

    def prompt(self, doc: dict, chat: bool = False) -> str:
        """The puzzle text ('1.../..2./..../.4..'); the tiny models were trained on it inside the chat template."""
        return doc["puzzle"]

    def extract(self, completion: str, doc: dict) -> str | None:
        """The 16-digit grid at the start of the completion (before any stop string), else None."""
        for stop in self.stop_strings:
            completion = completion.split(stop, 1)[0]
        cells = "".join(completion.split()).replace(ROW_SEPARATOR, "")
        if len(cells) != CELLS or any(c not in DIGITS for c in cells):
            return None
        return cells

    def score(self, completion: str, doc: dict) -> Score:
        """Correct = a valid grid that keeps all clues; details say which of the two failed."""
        extracted = self.extract(completion, doc)
        gold = doc["solution"]
        if extracted is None:
            details = {"well_formed": False, "valid": False, "keeps_clues": False}
            return Score(correct=False, extracted=None, gold=gold, details=details)
        grid = np.array([int(c) for c in extracted], dtype=np.int8)
        clues = parse_puzzle(doc["puzzle"])
        valid = is_valid_grid(grid)
        keeps_clues = bool(np.all(grid[clues > 0] == clues[clues > 0]))
        details = {"well_formed": True, "valid": valid, "keeps_clues": keeps_clues}
        return Score(correct=valid and keeps_clues, extracted=extracted, gold=gold, details=details)
