"""Execution as the papers' code_eval ran it (scoring=paper), and lm_eval mode's listed corrections, on our own
adversarial cases whose expected verdicts come from the real lm-eval 0.4.8 / 0.4.13 + HF code_eval and Fast-dLLM's
postprocess (tests/fixtures/tasks/paper/code_eval_probes.json, gpqa_choice_order.json; README there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dllm_bench.tasks import get_task
from dllm_bench.tasks.code_eval_semantics import CODE_EVAL_TIMEOUT_S, code_eval_program, kill_after_s
from dllm_bench.tasks.gpqa import multi_choice_extract
from dllm_bench.tasks.sandbox import Limits, execute

PAPER = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "paper"
PROBES = json.loads((PAPER / "code_eval_probes.json").read_text())
# cases that run for seconds (code_eval's 3 s limit, or our 10 CPU-seconds in lm_eval mode)
SLOW = {"sleep_1", "sleep_5", "spin_6", "swallow_alarm", "swallow_forever", "canonical_123", "main_block_6",
        "body_sleep_5"}

# lm_eval mode differs from lm-eval 0.4.13 on these cases, each for a correction docs/tasks.md lists
RUNS_AS_MAIN = "runs the program as __main__ (its `if __name__ == '__main__':` block runs)"
NO_GUARD = "no reliability_guard (os.getcwd, os.chdir, shutil.rmtree, ... work; the env is not changed)"
STDLIB_ONLY = "stdlib only: third-party packages are not importable"
EXTRACTS = "fence / [BEGIN] extraction and test_setup_code"
CPU_LIMIT = "10 CPU-seconds instead of 3 wall-clock seconds (sleeping does not count)"
STDIN = "stdin is /dev/null (reading it gives EOF, '' for read())"
LM_EVAL_DIFFERS = {
    **{f"main_block_{i}": RUNS_AS_MAIN for i in range(10) if i != 9}, "name_is_builtins": RUNS_AS_MAIN,
    **{f"disabled_{i}": NO_GUARD for i in (0, 1, 2, 3, 4, 5, 6, 10, 14, 15, 16, 17)}, "allowed_2": NO_GUARD,
    "allowed_3": STDLIB_ONLY, "reads_stdin": STDIN,
    "fence": EXTRACTS, "begin": EXTRACTS, "setup_code_needed": EXTRACTS,
    "sleep_5": CPU_LIMIT, "spin_6": CPU_LIMIT, "canonical_123": CPU_LIMIT,
}
# main_block_9 calls os.getcwd inside the block: it passes both ways. disabled_7/8/9/11/12/13 (os.system,
# subprocess, os.kill, exit, quit, help) are refused by our sandbox's audit hook or fail as well.
HUMANEVAL_LM_EVAL_DIFFERS = {"body_getcwd": NO_GUARD, "body_abspath": NO_GUARD, "body_name": RUNS_AS_MAIN,
                             "body_sleep_5": CPU_LIMIT,
                             "fence_main": "fenced code extracted and sanitised"}


def _cases(task_name: str, slow: bool) -> list[dict]:
    return [p for p in PROBES[task_name] if (p["name"] in SLOW) == slow]


def _score(task_name: str, mode: str, cases: list[dict]) -> list:
    """Cases whose verdict does not depend on time get a generous wall clock (the test machine may be loaded)."""
    timed = any(p["name"] in SLOW for p in cases)
    task = get_task(task_name, scoring=mode, **({} if timed or mode != "paper" else {"wall_timeout_s": 20}))
    return task.score_many([p["completion"] for p in cases], [p["doc"] for p in cases], workers=4)


# verdicts that depend on the machine's speed, not on the sandbox: mbpp/123's canonical solution runs about 4 s on
# the recording machine (timed out under code_eval's 3 s) and under 3 s on a faster or idler one (passes)
SPEED_DEPENDENT = {"canonical_123": {(True, "passed")}}


def _check_paper_mbpp(cases: list[dict]) -> None:
    for p, s in zip(cases, _score("mbpp", "paper", cases)):
        expected = p["lm_eval_0.4.8"]
        assert p["lm_eval_0.4.13"]["passed"] == expected["passed"], p["name"]  # mbpp is the same in both versions
        allowed = {(expected["passed"], expected["result"]), *SPEED_DEPENDENT.get(p["name"], ())}
        assert (s.correct, s.details["code_eval_result"] or "passed") in allowed, (p["name"], s.details)
        assert s.details["execution"] == "code_eval"


def test_paper_mbpp_is_code_eval():
    """Verdict and code_eval's own result text (`failed: 'NoneType' object is not callable`, ...) per case."""
    _check_paper_mbpp(_cases("mbpp", slow=False))


@pytest.mark.slow
def test_paper_mbpp_is_code_eval_timed():
    """code_eval's 3 s wall clock: sleeping counts, a caught timeout passes, an ignored one is killed; mbpp/123's
    canonical solution takes about 4 s on the 2-core machine the fixture was recorded on (its verdict follows the
    machine's speed: ``SPEED_DEPENDENT``)."""
    _check_paper_mbpp(_cases("mbpp", slow=True))


def _check_paper_humaneval(cases: list[dict]) -> None:
    for p, s in zip(cases, _score("humaneval", "paper", cases)):
        assert (s.correct, s.details["code_eval_result"] or "passed") == (p["fast_dllm"]["passed"],
                                                                          p["fast_dllm"]["result"]), p["name"]


def test_paper_humaneval_is_fast_dllm_with_code_eval():
    _check_paper_humaneval(_cases("humaneval", slow=False))


@pytest.mark.slow
def test_paper_humaneval_is_fast_dllm_with_code_eval_timed():
    _check_paper_humaneval(_cases("humaneval", slow=True))


def _check_lm_eval_mode(task_name: str, cases: list[dict], differs: dict[str, str]) -> None:
    got = {p["name"]: s.correct for p, s in zip(cases, _score(task_name, "lm_eval", cases))}
    disagree = {p["name"] for p in cases if got[p["name"]] != p["lm_eval_0.4.13"]["passed"]}
    assert disagree == {n for n in differs if n in got}


def test_lm_eval_mode_differs_from_0413_only_by_listed_corrections():
    _check_lm_eval_mode("mbpp", _cases("mbpp", slow=False), LM_EVAL_DIFFERS)
    _check_lm_eval_mode("humaneval", _cases("humaneval", slow=False), HUMANEVAL_LM_EVAL_DIFFERS)


@pytest.mark.slow
def test_lm_eval_mode_differs_from_0413_only_by_listed_corrections_timed():
    _check_lm_eval_mode("mbpp", _cases("mbpp", slow=True), LM_EVAL_DIFFERS)
    _check_lm_eval_mode("humaneval", _cases("humaneval", slow=True), HUMANEVAL_LM_EVAL_DIFFERS)


def test_rows_record_both_limits():
    doc = PROBES["mbpp"][-1]["doc"]
    paper = get_task("mbpp", scoring="paper", wall_timeout_s=20).score(doc["code"], doc)
    assert paper.correct and (paper.details["cpu_limit_s"], paper.details["wall_limit_s"]) == (10.0, 20.0)
    assert get_task("mbpp", scoring="paper").wall_timeout_s == CODE_EVAL_TIMEOUT_S == 3.0
    lm = get_task("mbpp", scoring="lm_eval", timeout_s=5).score(doc["code"], doc)
    assert lm.details["execution"] == "sandbox" and (lm.details["cpu_limit_s"], lm.details["wall_limit_s"]) == (5.0, 25.0)


@pytest.mark.parametrize("bad", [0, -1, True, "3"])
def test_bad_wall_timeout_is_refused(bad):
    with pytest.raises(ValueError, match=r"wall_timeout_s=.*expected a positive number of seconds or null"):
        get_task("humaneval", scoring="paper", wall_timeout_s=bad)


def test_wrapper_keeps_the_program_text_and_its_own_limit():
    """Placeholders of the wrapper inside the program are not rewritten; the timer is the given one."""
    program = "s = 'SOURCE SECONDS PRELOADED HIDDEN_MODULES'\nassert s.split()[0] == 'SO' + 'URCE'\nimport time\ntime.sleep(1.5)\n"
    limits = Limits(site_packages=False)
    assert execute(code_eval_program(program, 3.0), 10, limits, wall_timeout_s=kill_after_s(3.0)).passed
    slow = execute(code_eval_program(program, 1.0), 10, limits, wall_timeout_s=kill_after_s(1.0))
    assert not slow.passed and slow.stderr.strip().endswith("code_eval: timed out")
    with pytest.raises(ValueError, match="timeout_s=0"):
        code_eval_program(program, 0)


GPQA = json.loads((PAPER / "gpqa_choice_order.json").read_text())["cases"]


@pytest.mark.parametrize("mode,version", [("paper", "lm_eval_0.4.8"), ("lm_eval", "lm_eval_0.4.13")])
def test_gpqa_flexible_filter_equals_its_version(mode, version):
    """0.4.8 builds the choice alternation in choice order (a choice that prefixes a later one wins), 0.4.13
    longest first; the task's flexible-extract in each mode equals that version's filter on every case."""
    task = get_task("gpqa_main", scoring=mode)
    got = [task.extract(c["completion"], {"choices": c["choices"]}) for c in GPQA]
    assert got == [c[version] for c in GPQA]
    assert sum(c["lm_eval_0.4.8"] != c["lm_eval_0.4.13"] for c in GPQA) == 8


def test_gpqa_choice_order_only_matters_for_the_text_branch():
    choices = ["Guilty", "Guilty of Romance", "Innocent", "Not proven"]
    for text in ("the answer is (C)", "answer: D", "nothing"):
        assert multi_choice_extract(text, choices, True) == multi_choice_extract(text, choices, False)
