"""The Task interface every benchmark implements: docs, prompt, stop strings, extraction, scoring."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dllm_bench.decoding.params import Registry

# name -> task class, filled by ``@register`` where each task is defined (the registry style of rules and caches)
TASKS = Registry("task")
register = TASKS.register


@dataclass(frozen=True)
class Score:
    """One sample's verdict: whether it is correct, what was extracted and what it was compared with."""

    correct: bool
    extracted: Any
    gold: Any
    details: dict[str, Any] = field(default_factory=dict)


SCORING_MODES = ("lm_eval", "paper")


@dataclass
class TaskConfig:
    """Options common to all tasks (selection, few-shot count, local data override, sharding, scoring mode).

    `scoring`: `lm_eval` = current lm-eval's prompts and metrics (with our listed corrections); `paper` = what
    the papers' pipeline computed (lm-eval 0.4.8, Fast-dLLM's HumanEval postprocess); docs/tasks.md.
    """

    limit: int | None = None
    offset: int = 0
    num_fewshot: int | None = None
    data_files: str | None = None
    data_dir: str | None = None
    rank: int = 0
    world_size: int = 1
    scoring: str = "lm_eval"

    def __post_init__(self) -> None:
        if self.scoring not in SCORING_MODES:
            raise ValueError(f"scoring={self.scoring!r}: expected one of {', '.join(SCORING_MODES)}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 0):
            raise ValueError(f"limit={self.limit!r}: expected a non-negative int or None")
        if not isinstance(self.offset, int) or self.offset < 0:
            raise ValueError(f"offset={self.offset!r}: expected a non-negative int")
        if self.num_fewshot is not None and (not isinstance(self.num_fewshot, int) or self.num_fewshot < 0):
            raise ValueError(f"num_fewshot={self.num_fewshot!r}: expected a non-negative int or None")
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise ValueError(f"world_size={self.world_size!r}: expected an int >= 1")
        if not isinstance(self.rank, int) or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank={self.rank!r}: expected an int in [0, world_size={self.world_size})")
        if self.data_files is not None and self.data_dir is not None:
            raise ValueError("give data_files or data_dir, not both")


def select_docs(rows: list[dict], cfg: TaskConfig) -> list[dict]:
    """Apply offset, then limit, then the rank's stride (lm-eval's order: limit is global, ranks interleave)."""
    end = None if cfg.limit is None else cfg.offset + cfg.limit
    return rows[cfg.offset : end][cfg.rank :: cfg.world_size]


class Task:
    """Base class: subclasses set `name`, `default_num_fewshot`, `stop_strings` and implement the hooks.

    `docs()` returns the selected rows (each with a stable `sample_id`); `prompt(doc, chat)` is the text
    before any chat template; `extract` pulls the answer out of a completion; `score` compares it to gold.
    """

    name: str = ""
    default_num_fewshot: int = 0
    stop_strings: tuple[str, ...] = ()
    needs_images: bool = False

    def __init__(self, **cfg: Any) -> None:
        self.config = TaskConfig(**cfg)
        self._all_docs: list[dict] | None = None

    @property
    def scoring(self) -> str:
        """`paper` or `lm_eval` (TaskConfig.scoring)."""
        return self.config.scoring

    @property
    def num_fewshot(self) -> int:
        """Shots in the prompt: the config's value, else the task's default."""
        n = self.config.num_fewshot
        return self.default_num_fewshot if n is None else n

    def stop_strings_for(self, chat: bool) -> tuple[str, ...]:
        """Stop strings for plain or chat prompting (equal unless a task prompts differently in chat)."""
        return self.stop_strings

    def load_all_docs(self) -> list[dict]:
        """Every evaluation row of the split, in file order, each with a `sample_id`."""
        raise NotImplementedError

    def all_docs(self) -> list[dict]:
        """Cached `load_all_docs()`."""
        if self._all_docs is None:
            self._all_docs = self.load_all_docs()
        return self._all_docs

    def docs(self) -> list[dict]:
        """The rows this process evaluates: offset, limit and rank/world_size applied."""
        return select_docs(self.all_docs(), self.config)

    def prompt(self, doc: dict, chat: bool = False) -> str:
        """The prompt text for `doc` (few-shot context included), before any chat template."""
        raise NotImplementedError

    def extract(self, completion: str, doc: dict) -> Any:
        """The answer found in `completion` (None when there is none)."""
        raise NotImplementedError

    def score(self, completion: str, doc: dict) -> Score:
        """Extract and compare with the gold answer."""
        raise NotImplementedError

    def preflight(self) -> None:
        """Checks that must pass before a model is loaded (code tasks: the sandbox can isolate); ValueError if not."""

    def score_many(self, completions: list[str], docs: list[dict], workers: int | None = None) -> list[Score]:
        """`score` over many samples (code tasks run their programs in parallel)."""
        if len(completions) != len(docs):
            raise ValueError(f"{len(completions)} completions for {len(docs)} docs")
        return [self.score(c, d) for c, d in zip(completions, docs)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, num_fewshot={self.num_fewshot}, {self.config})"
