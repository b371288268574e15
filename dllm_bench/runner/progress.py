"""Progress bar with running accuracy, mean NFE and tokens/s over timed (post-warm-up) batches."""

from __future__ import annotations

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
            self.nfe += int(r["nfe"])
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
