"""Tasks scored by running the model's code against official tests in the sandbox (HumanEval, MBPP).

The candidate and the tests run in two processes (sandbox.ProgramWithTests): the tests call the candidate's
functions with plain data, and the verdict comes over the harness's private report pipe, out of the candidate's
reach. Where this harness fails a program, the
published harness (code_eval's `exec` of candidate + tests in one namespace, the venv's package data in view)
runs it too: a program it would have passed is counted (`published_passed_ours_failed`, docs/sandbox.md,
"Forged passes").
"""

from __future__ import annotations

from dllm_bench.tasks.base import Score, Task
from dllm_bench.tasks.code_eval_semantics import (
    CODE_EVAL_TIMEOUT_S,
    code_eval_program,
    code_eval_result,
    code_eval_runner,
    kill_after_s,
)
from dllm_bench.tasks.sandbox import (
    FULL,
    ExecResult,
    Limits,
    ProgramWithTests,
    SandboxUnavailable,
    default_wall_timeout,
    execute_many,
    require_isolation,
)

VERDICT_FIELDS = ("isolation", "sandbox_status", "sandbox_reason", "sandbox_published_passed")


def verdict_fields(details: dict) -> dict:
    """A code task's sample-row fields: how it was isolated, the sandbox's verdict with its reason (one line), so
    a wrong answer and a killed or timed-out program read differently in samples.jsonl, and whether the published
    harness passed a program this one failed (None where it was not asked: this one passed). Empty otherwise."""
    if "status" not in details:
        return {}
    reason = str(details.get("reason") or "").strip()
    return {"isolation": details.get("isolation", ""), "sandbox_status": details["status"],
            "sandbox_reason": reason.splitlines()[0] if reason else "",
            "sandbox_published_passed": details.get("published_passed")}


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

    def tests(self, doc: dict) -> str:
        """The official tests of `doc`, run after the candidate (in the harness's process, against its globals)."""
        raise NotImplementedError

    def test_setup(self, doc: dict) -> str:
        """The part of `tests(doc)` that builds the tests' inputs (MBPP's test_setup_code): it runs after the
        candidate in the candidate's process, so the objects it builds of the candidate's classes stay there and
        the tests pass them by reference. "" when none; `tests(doc)` must begin with it."""
        return ""

    def program(self, code: str, doc: dict) -> str:
        """Candidate and tests as one program: the text the published harnesses execute."""
        return code + "\n" + self.tests(doc)

    def run_spec(self) -> tuple[Limits | None, float]:
        """(sandbox limits, sandbox wall-clock backstop). code_eval ran in the evaluating process's environment, so
        paper mode sees the installed packages (their benchmark data files hidden); under OS isolation the audit
        hook (which refuses the ctypes that numpy loads) is dropped, the OS being the boundary."""
        if not self.code_eval:
            return None, self.wall_timeout_s
        hook = require_isolation(self.allow_unisolated) != FULL
        return Limits(site_packages=True, audit_hook=hook), kill_after_s(self.wall_timeout_s)

    def executed_program(self, code: str, doc: dict) -> ProgramWithTests:
        """What the sandbox runs: the candidate, its tests apart, and in paper mode code_eval's semantics."""
        runner = code_eval_runner(self.wall_timeout_s) if self.code_eval else None
        setup, tests = self.test_setup(doc), self.tests(doc)
        if not setup:
            return ProgramWithTests(code, tests, runner)
        if not tests.startswith(setup + "\n"):
            raise ValueError(f"{self.name}: tests(doc) must begin with test_setup(doc)")
        return ProgramWithTests(code + "\n" + setup, tests[len(setup) + 1:], runner)

    def published_run(self, code: str, doc: dict) -> tuple[str, Limits, float]:
        """(program, limits, backstop) of the published harness: code_eval's wrapper around the one-text program,
        with the venv's packages and their data in view (stdlib only in the weaker mode, which refuses packages)."""
        packages = require_isolation(self.allow_unisolated) == FULL
        limits = Limits(site_packages=packages, audit_hook=not packages, package_data=True)
        seconds = self.wall_timeout_s if self.code_eval else CODE_EVAL_TIMEOUT_S
        return code_eval_program(self.program(code, doc), seconds), limits, kill_after_s(seconds)

    def score(self, completion: str, doc: dict) -> Score:
        return self.score_many([completion], [doc], workers=1)[0]

    def score_many(self, completions: list[str], docs: list[dict], workers: int | None = None) -> list[Score]:
        """Programs run `workers` at a time, each in its own sandboxed process; those that fail run once more
        as the published harness would run them."""
        if len(completions) != len(docs):
            raise ValueError(f"{len(completions)} completions for {len(docs)} docs")
        codes = [self.extract(c, d) for c, d in zip(completions, docs)]
        limits, wall = self.run_spec()
        results = execute_many([self.executed_program(c, d) for c, d in zip(codes, docs)], self.timeout_s, workers,
                               limits, allow_unisolated=self.allow_unisolated, wall_timeout_s=wall)
        failed = [i for i, r in enumerate(results) if not r.passed]
        published: dict[int, ExecResult] = {}
        if failed:
            runs = [self.published_run(codes[i], docs[i]) for i in failed]
            again = execute_many([p for p, _, _ in runs], self.timeout_s, workers, runs[0][1],
                                 allow_unisolated=self.allow_unisolated, wall_timeout_s=runs[0][2])
            published = dict(zip(failed, again))
        return [self._verdict(c, d, r, published.get(i)) for i, (c, d, r) in enumerate(zip(codes, docs, results))]

    def _verdict(self, code: str, doc: dict, result: ExecResult, published: ExecResult | None) -> Score:
        details = {"status": result.status, "reason": result.reason, "isolation": result.isolation,
                   "execution": "code_eval" if self.code_eval else "sandbox", "cpu_limit_s": self.timeout_s,
                   "wall_limit_s": self.wall_timeout_s,
                   "published_passed": None if published is None else published.passed,
                   "published_passed_ours_failed": published is not None and published.passed}
        if self.code_eval:
            said = code_eval_result(result.report, result.passed)
            if not said and result.status == "timeout":
                said = "timed out"  # still running at code_eval's kill time: its result reads the same
            details["code_eval_result"] = said or None
            if said == "timed out":
                details.update(status="timeout", reason=f"code_eval: wall-clock limit of {self.wall_timeout_s:g} s")
            elif said:
                details["reason"] = "code_eval: " + said
        return Score(correct=result.passed, extracted=code, gold=doc[self.gold_key], details=details)
