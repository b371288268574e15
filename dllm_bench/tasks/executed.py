"""Tasks scored by running the model's code against official tests in the sandbox (HumanEval, MBPP)."""

from __future__ import annotations

from dllm_bench.tasks.base import Score, Task
from dllm_bench.tasks.sandbox import ExecResult, SandboxUnavailable, execute, execute_many, require_isolation

VERDICT_FIELDS = ("isolation", "sandbox_status", "sandbox_reason")


def verdict_fields(details: dict) -> dict[str, str]:
    """A code task's sample-row fields: how it was isolated and the sandbox's verdict with its reason (one line),
    so a wrong answer and a killed or timed-out program read differently in samples.jsonl. Empty otherwise."""
    if "status" not in details:
        return {}
    reason = str(details.get("reason") or "").strip()
    return {"isolation": details.get("isolation", ""), "sandbox_status": details["status"],
            "sandbox_reason": reason.splitlines()[0] if reason else ""}


class ExecutedTask(Task):
    """A task whose ``program(code, doc)`` must run to its end; subclasses set ``gold_key``.

    Config: ``timeout_s`` (CPU seconds per program; a wall-clock backstop of 3x + 10 s catches sleepers) and
    ``allow_unisolated`` (run with rlimits + audit hook only when OS isolation is unavailable; off by default).
    """

    gold_key: str

    def __init__(self, *, timeout_s: float = 10.0, allow_unisolated: bool = False, **cfg) -> None:
        super().__init__(**cfg)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number of CPU seconds")
        if not isinstance(allow_unisolated, bool):
            raise ValueError(f"allow_unisolated={allow_unisolated!r}: expected true or false")
        self.timeout_s = float(timeout_s)
        self.allow_unisolated = allow_unisolated

    def preflight(self) -> None:
        """Refuse (ValueError, one line) before any model is loaded when the sandbox would refuse anyway."""
        try:
            require_isolation(self.allow_unisolated)
        except SandboxUnavailable as e:
            raise ValueError(str(e)) from None

    def program(self, code: str, doc: dict) -> str:
        raise NotImplementedError

    def score(self, completion: str, doc: dict) -> Score:
        code = self.extract(completion, doc)
        result = execute(self.program(code, doc), self.timeout_s, allow_unisolated=self.allow_unisolated)
        return self._verdict(code, doc, result)

    def score_many(self, completions: list[str], docs: list[dict], workers: int | None = None) -> list[Score]:
        """Programs run `workers` at a time, each in its own sandboxed process."""
        if len(completions) != len(docs):
            raise ValueError(f"{len(completions)} completions for {len(docs)} docs")
        codes = [self.extract(c, d) for c, d in zip(completions, docs)]
        results = execute_many([self.program(c, d) for c, d in zip(codes, docs)], self.timeout_s, workers,
                               allow_unisolated=self.allow_unisolated)
        return [self._verdict(c, d, r) for c, d, r in zip(codes, docs, results)]

    def _verdict(self, code: str, doc: dict, result: ExecResult) -> Score:
        return Score(correct=result.passed, extracted=code, gold=doc[self.gold_key],
                     details={"status": result.status, "reason": result.reason, "isolation": result.isolation})
