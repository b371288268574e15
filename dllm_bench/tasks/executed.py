"""Tasks scored by running the model's code against official tests in the sandbox (HumanEval, MBPP)."""

from __future__ import annotations

from dllm_bench.tasks.base import Score, Task
from dllm_bench.tasks.code_eval_semantics import (
    CODE_EVAL_TIMEOUT_S,
    code_eval_program,
    code_eval_result,
    kill_after_s,
)
from dllm_bench.tasks.sandbox import (
    FULL,
    ExecResult,
    Limits,
    SandboxUnavailable,
    default_wall_timeout,
    execute,
    execute_many,
    require_isolation,
)

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

    Config: ``timeout_s`` (CPU seconds per program), ``wall_timeout_s`` (wall-clock seconds; None = the mode's
    default: scoring=paper runs the program as HF code_eval did, with its 3 s limit, code_eval_semantics.py;
    lm_eval mode runs it as `__main__` with a backstop of 3x + 10 s that catches sleepers) and
    ``allow_unisolated`` (run with rlimits + audit hook only when OS isolation is unavailable; off by default).
    Both limits are recorded in every row's details.
    """

    gold_key: str

    def __init__(self, *, timeout_s: float = 10.0, wall_timeout_s: float | None = None,
                 allow_unisolated: bool = False, **cfg) -> None:
        super().__init__(**cfg)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number of CPU seconds")
        if wall_timeout_s is not None and (isinstance(wall_timeout_s, bool) or not isinstance(wall_timeout_s, (int, float))
                                           or not wall_timeout_s > 0):
            raise ValueError(f"wall_timeout_s={wall_timeout_s!r}: expected a positive number of seconds or null")
        if not isinstance(allow_unisolated, bool):
            raise ValueError(f"allow_unisolated={allow_unisolated!r}: expected true or false")
        self.timeout_s = float(timeout_s)
        self.code_eval = self.scoring == "paper"
        default_wall = CODE_EVAL_TIMEOUT_S if self.code_eval else default_wall_timeout(self.timeout_s)
        self.wall_timeout_s = float(default_wall if wall_timeout_s is None else wall_timeout_s)
        self.allow_unisolated = allow_unisolated

    def preflight(self) -> None:
        """Refuse (ValueError, one line) before any model is loaded when the sandbox would refuse anyway."""
        try:
            require_isolation(self.allow_unisolated)
        except SandboxUnavailable as e:
            raise ValueError(str(e)) from None

    def program(self, code: str, doc: dict) -> str:
        raise NotImplementedError

    def run_spec(self) -> tuple[Limits | None, float]:
        """(sandbox limits, sandbox wall-clock backstop). code_eval ran in the evaluating process's environment, so
        paper mode sees the installed packages; under OS isolation the audit hook (which refuses the ctypes that
        numpy loads) is dropped, the OS being the boundary."""
        if not self.code_eval:
            return None, self.wall_timeout_s
        hook = require_isolation(self.allow_unisolated) != FULL
        return Limits(site_packages=True, audit_hook=hook), kill_after_s(self.wall_timeout_s)

    def executed_program(self, code: str, doc: dict) -> str:
        """The text the sandbox runs: `program(code, doc)`, wrapped in code_eval's semantics in paper mode."""
        program = self.program(code, doc)
        return code_eval_program(program, self.wall_timeout_s) if self.code_eval else program

    def score(self, completion: str, doc: dict) -> Score:
        code = self.extract(completion, doc)
        limits, wall = self.run_spec()
        result = execute(self.executed_program(code, doc), self.timeout_s, limits,
                         allow_unisolated=self.allow_unisolated, wall_timeout_s=wall)
        return self._verdict(code, doc, result)

    def score_many(self, completions: list[str], docs: list[dict], workers: int | None = None) -> list[Score]:
        """Programs run `workers` at a time, each in its own sandboxed process."""
        if len(completions) != len(docs):
            raise ValueError(f"{len(completions)} completions for {len(docs)} docs")
        codes = [self.extract(c, d) for c, d in zip(completions, docs)]
        limits, wall = self.run_spec()
        results = execute_many([self.executed_program(c, d) for c, d in zip(codes, docs)], self.timeout_s, workers,
                               limits, allow_unisolated=self.allow_unisolated, wall_timeout_s=wall)
        return [self._verdict(c, d, r) for c, d, r in zip(codes, docs, results)]

    def _verdict(self, code: str, doc: dict, result: ExecResult) -> Score:
        details = {"status": result.status, "reason": result.reason, "isolation": result.isolation,
                   "execution": "code_eval" if self.code_eval else "sandbox", "cpu_limit_s": self.timeout_s,
                   "wall_limit_s": self.wall_timeout_s}
        if self.code_eval:
            said = code_eval_result(result.stderr, result.passed)
            if not said and result.status == "timeout":
                said = "timed out"  # still running at code_eval's kill time: its result reads the same
            details["code_eval_result"] = said or None
            if said == "timed out":
                details.update(status="timeout", reason=f"code_eval: wall-clock limit of {self.wall_timeout_s:g} s")
            elif said:
                details["reason"] = "code_eval: " + said
        return Score(correct=result.passed, extracted=code, gold=doc[self.gold_key], details=details)
