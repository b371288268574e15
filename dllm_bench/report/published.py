"""Read the papers' published numbers (results/published/published_results.csv) keeping their printed precision."""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PUBLISHED_CSV = REPO_ROOT / "results" / "published" / "published_results.csv"

PUBLISHED_COLUMNS = (
    "paper", "table", "model", "task", "num_fewshot", "gen_length", "block_length", "cache", "method",
    "method_param", "accuracy", "tokens_per_s", "nfe", "speedup", "hardware", "note",
)
NUMERIC_COLUMNS = ("accuracy", "tokens_per_s", "nfe", "speedup")


@dataclass(frozen=True)
class PublishedRow:
    """One printed cell group of a paper table; `text` keeps every field exactly as in the CSV."""

    text: dict[str, str]

    def __getitem__(self, key: str) -> str:
        return self.text[key]

    def number(self, column: str) -> float | None:
        """The printed value as a float, or None where the paper prints nothing."""
        raw = self.text[column].strip()
        return float(raw) if raw else None

    def integer(self, column: str) -> int | None:
        """An integer setting (shots, lengths), or None where the paper does not state it."""
        raw = self.text[column].strip()
        return int(float(raw)) if raw else None

    def params(self) -> dict[str, str]:
        """`method_param` ("tau=0.9;f=0.75") as a dict of strings."""
        raw = self.text["method_param"].strip()
        return dict(item.split("=", 1) for item in raw.split(";")) if raw else {}


def load_published(path: Path | str = PUBLISHED_CSV) -> list[PublishedRow]:
    """All published rows in file order; fails naming the file if its header is not the expected one."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != PUBLISHED_COLUMNS:
            raise ValueError(f"{path}: header {reader.fieldnames} is not the published schema {list(PUBLISHED_COLUMNS)}")
        return [PublishedRow({k: (v or "") for k, v in row.items()}) for row in reader]


def decimals(printed: str) -> int:
    """Number of decimals a printed number shows ("79.30" -> 2, "107135" -> 0)."""
    printed = printed.strip()
    return len(printed.split(".", 1)[1]) if "." in printed else 0


REPRODUCTIONS_CSV = REPO_ROOT / "results" / "published" / "independent_reproductions.csv"
# the columns that name a published row: a reproduction carries the same values as the row it reproduces
KEY_COLUMNS = PUBLISHED_COLUMNS[:10]
REPRODUCTION_COLUMNS = (
    *KEY_COLUMNS, "official_accuracy", "official_tokens_per_s", "accuracy", "tokens_per_s", "speedup", "tokens_per_forward",
    "reproduced_by", "repo", "path", "commit", "note",
)
# the table metrics a reproduction can carry (the reproducer prints no others)
REPRODUCED_METRICS = ("accuracy", "tokens_per_s", "speedup", "tokens_per_forward")


@dataclass(frozen=True)
class Reproduction:
    """An independent reproduction of one published row (another group's run of the same setting), with the
    official number it printed beside its own and where it is printed (repository, path, commit)."""

    text: dict[str, str]

    def __getitem__(self, key: str) -> str:
        return self.text[key]

    def key(self) -> tuple[str, ...]:
        return tuple(self.text[c] for c in KEY_COLUMNS)

    def source(self) -> str:
        """`who (repo path @ commit)`, as a table's note cites it."""
        return f"{self.text['reproduced_by']}: {self.text['repo']} {self.text['path']} @ {self.text['commit'][:7]}"


def load_reproductions(path: Path | str = REPRODUCTIONS_CSV) -> list[Reproduction]:
    """Every independent reproduction in file order; fails naming the file if its header is not the schema."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != REPRODUCTION_COLUMNS:
            raise ValueError(f"{path}: header {reader.fieldnames} is not the reproduction schema "
                             f"{list(REPRODUCTION_COLUMNS)}")
        return [Reproduction({k: (v or "") for k, v in row.items()}) for row in reader]


def reproduction_of(row: PublishedRow | None, reproductions: list[Reproduction]) -> Reproduction | None:
    """The reproduction of a published row (same key columns), or None."""
    if row is None:
        return None
    key = tuple(row.text[c] for c in KEY_COLUMNS)
    return next((r for r in reproductions if r.key() == key), None)


@functools.cache
def known_reproductions(path: Path = REPRODUCTIONS_CSV) -> tuple[Reproduction, ...]:
    """`load_reproductions`, read once per process (every table looks its cells up in it)."""
    return tuple(load_reproductions(path))
