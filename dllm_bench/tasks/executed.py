"""Tasks scored by running the model's code against official tests in the sandbox (HumanEval, MBPP)."""

from __future__ import annotations

from dllm_bench.tasks.base import Score, Task
from dllm_bench.tasks.sandbox import ExecResult, execute, execute_many


class ExecutedTask(Task):
    """A task whose ``program(code, doc)`` must run to its end; subclasses set ``gold_key`` and ``timeout_s``."""

    gold_key: str
    timeout_s: float

    def program(self, code: str, doc: dict) -> str:
        raise NotImplementedError

    def score(self, completion: str, doc: dict) -> Score:
        code = self.extract(completion, doc)
        return self._verdict(code, doc, execute(self.program(code, doc), self.timeout_s))

    def score_many(self, completions: list[str], docs: list[dict], workers: int | None = None) -> list[Score]:
        """Programs run `workers` at a time, each in its own sandboxed process."""
        if len(completions) != len(docs):
            raise ValueError(f"{len(completions)} completions for {len(docs)} docs")
        codes = [self.extract(c, d) for c, d in zip(completions, docs)]
        results = execute_many([self.program(c, d) for c, d in zip(codes, docs)], self.timeout_s, workers)
        return [self._verdict(c, d, r) for c, d, r in zip(codes, docs, results)]

    def _verdict(self, code: str, doc: dict, result: ExecResult) -> Score:
        return Score(correct=result.passed, extracted=code, gold=doc[self.gold_key],
                     details={"status": result.status, "reason": result.reason})
