"""Progress: a run's bar with running accuracy, mean NFE and tokens/s over timed (post-warm-up) batches; a
multi-cell command's line per finished cell, with the cells left and their ETA at the pace so far."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tqdm.auto import tqdm


class RunProgress:
    """tqdm bar over documents; `update(rows)` folds in one finished batch's sample rows."""

    def __init__(self, total: int, initial: int, desc: str, enabled: bool, count_rule: str, position: int = 0):
        self.bar = tqdm(total=total, initial=initial, desc=desc, disable=not enabled, position=position,
                        dynamic_ncols=True, leave=True)
        self.count_rule = count_rule
        self.n = self.correct = self.nfe = self.tokens = 0
        self.wall = 0.0

    def update(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            self.n += 1
            self.correct += bool(r["correct"])
            self.nfe += int(r["nfe"] or 0)  # a server reporting no NFE adds none
            self.tokens += int(r[f"tokens_{self.count_rule}"])
            self.wall += float(r["wall_time_s"])
        self.bar.set_postfix(acc=f"{self.correct / max(self.n, 1):.3f}", nfe=f"{self.nfe / max(self.n, 1):.1f}",
                             tok_s=f"{self.tokens / self.wall:.1f}" if self.wall > 0 else "-", refresh=False)
        self.bar.update(len(rows))

    def close(self) -> None:
        self.bar.close()


class TimingProgress:
    """tqdm bar over the batch-1 timing pass's documents, with their running tokens/s."""

    def __init__(self, total: int, desc: str, enabled: bool, count_column: str):
        self.bar = tqdm(total=total, desc=f"{desc} batch-1 timing", disable=not enabled, dynamic_ncols=True,
                        leave=True)
        self.column, self.tokens, self.wall = count_column, 0, 0.0

    def update(self, row: dict[str, Any]) -> None:
        self.tokens += int(row[self.column])
        self.wall += float(row["wall_time_s"])
        self.bar.set_postfix(tok_s=f"{self.tokens / self.wall:.1f}" if self.wall > 0 else "-", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def duration(seconds: float) -> str:
    """`45 s`, `3 min 20 s`, `2 h 05 min`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class CellProgress:
    """Counts cells against a plan of cells per group (table); `finish` gives the line a finished cell prints."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.planned: dict[str, int] = {}
        self.done = self.failed = 0
        self.spent = 0.0
        self._started: float | None = None

    @property
    def total(self) -> int:
        return sum(self.planned.values())

    def plan(self, group: str, cells: int) -> None:
        """Cells `group` will run (set again when a group is re-resolved at its turn: finished ones stay counted)."""
        self.planned[group] = cells

    def start(self) -> str:
        """Mark a cell's start; returns its position, `[3/18]`."""
        self._started = self.clock()
        return f"[{self.done + 1}/{self.total}]"

    def eta(self) -> str:
        """Cells left and their expected time at the mean pace of the finished cells."""
        left = self.total - self.done
        if not left:
            return "none left"
        if not self.done:
            return f"{left} left"
        return f"{left} left, ETA {duration(self.spent / self.done * left)}"

    def finish(self, label: str, outcome: str | None) -> str:
        """Count the cell that `start` began; the line naming it, its result (None: it failed) and the ETA."""
        elapsed = self.clock() - (self._started if self._started is not None else self.clock())
        self.done += 1
        self.failed += outcome is None
        self.spent += elapsed
        result = outcome if outcome is not None else "failed, the cell stays missing"
        return f"[{self.done}/{self.total}] {label}: {result} in {duration(elapsed)}; {self.eta()}"
