"""The audit hook's former gaps (`_posixsubprocess.fork_exec` starting /bin/sh, `sqlite3.connect` outside the
work dir), the weaker mode's private work dir and its plain refusal message, and `Limits(site_packages=True)`:
on both bwrap paths and in the weaker mode, each outcome checked on the host."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dllm_bench.tasks import sandbox
from dllm_bench.tasks.sandbox import Limits, SandboxUnavailable, execute, execute_many

FORK_EXEC = (  # the gap: subprocess's own C helper, by import and by importlib (no subprocess audit event)
    "import importlib.util, os\ntry:\n    import _posixsubprocess as ps\nexcept PermissionError:\n"
    "    ps = importlib.util.module_from_spec(importlib.util.find_spec('_posixsubprocess'))\n"
    "r, w = os.pipe()\n"
    "pid = ps.fork_exec(['/bin/sh', '-c', 'touch OUTSIDE/by_fork_exec'], [b'/bin/sh'], True, (w,), None, None,"
    " -1, -1, -1, -1, -1, -1, r, w, False, False, -1, None, None, None, -1, None, False)\n"
    "os.waitpid(pid, 0)\n"
)
SQLITE = ("import sqlite3\ndb = sqlite3.connect('OUTSIDE/by_sqlite.db')\ndb.execute('create table t (x)')\n"
          "db.commit()\n")
SQLITE_INSIDE = ("import sqlite3\nfor name in ('work.db', ':memory:'):\n    db = sqlite3.connect(name)\n"
                 "    db.execute('create table t (x)')\n    db.commit()\n")


@pytest.fixture(params=["two_bwrap", "one_bwrap", "weaker_mode"])
def mode(request, monkeypatch, use_bwrap_path) -> str:
    if request.param == "weaker_mode":
        monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "simulated")
    else:
        use_bwrap_path(request.param)
    return request.param


def _builtin_posixsubprocess(mode: str, python: str) -> bool:
    """Is `_posixsubprocess` compiled into the interpreter this mode runs (Debian's is)? importlib then makes a
    fresh copy without any audit event: the hook cannot refuse it, only the OS bounds what it starts."""
    if mode == "weaker_mode" and os.geteuid() == 0:  # a fresh uid runs an interpreter it can read
        python = (sandbox._weak_python() or [sys.executable])[0]
    elif mode != "one_bwrap":
        return "_posixsubprocess" in sys.builtin_module_names
    code = "import sys; print('_posixsubprocess' in sys.builtin_module_names)"
    return subprocess.run([python, "-I", "-S", "-c", code], capture_output=True, text=True).stdout.strip() == "True"


def test_fork_exec_and_sqlite_outside_the_work_dir_are_refused(tmp_path, mode, system_python):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(outside, 0o777)
    programs = [p.replace("OUTSIDE", str(outside)) for p in (FORK_EXEC, SQLITE, SQLITE_INSIDE)]
    fork_exec, sqlite, inside = execute_many(programs, timeout_s=5, workers=3, allow_unisolated=True)
    if not _builtin_posixsubprocess(mode, system_python):
        assert fork_exec.status == "failed" and "importing _posixsubprocess is not allowed" in fork_exec.reason, fork_exec
    assert sqlite.status == "failed"
    if mode == "weaker_mode":  # no OS boundary: sqlite3 (whose ATTACH creates files unseen by the hook) is refused
        assert "importing _sqlite3 is not allowed" in sqlite.reason, sqlite
        assert inside.status == "failed" and "importing _sqlite3 is not allowed" in inside.reason, inside
    else:  # under bwrap the host's /tmp is the work dir's link: the read-only view refuses
        assert inside.passed, inside
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("path", ["two_bwrap", "one_bwrap"])
def test_without_the_hook_the_os_still_bounds_them_under_bwrap(tmp_path, path, use_bwrap_path):
    """What bounds those calls when the hook is bypassed: the read-only view (and namespaces) of bwrap. (The
    weaker mode has only the hook: docs/sandbox.md says so.)"""
    use_bwrap_path(path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(outside, 0o777)
    programs = [p.replace("OUTSIDE", str(outside)) for p in (FORK_EXEC, SQLITE)]
    results = execute_many(programs, timeout_s=5, workers=2, limits=Limits(audit_hook=False))
    assert not any(r.passed for r in results[1:]), results
    assert list(outside.iterdir()) == []


def _weaker_mode_with_a_fresh_uid(monkeypatch, python: str) -> None:
    """The weaker mode as root with an interpreter any user can read: each sample gets a uid of its own."""
    if os.geteuid() != 0 or not python:
        pytest.skip("needs root and an interpreter in /usr/bin")
    monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "simulated")
    monkeypatch.setattr(sandbox, "_python_argv", lambda site: [python, "-I", "-S"])
    monkeypatch.setattr(sandbox, "_others_can_run_python", lambda: True)


PEEK = ("import os, stat\nwork = os.stat('.')\nassert stat.S_IMODE(work.st_mode) == 0o700 and work.st_uid == os.getuid()\n"
        "for name in ('stdout', 'stderr'):\n    assert stat.S_IMODE(os.stat('../' + name).st_mode) == 0o600\n"
        "    try:\n        open('../' + name).read()\n    except PermissionError:\n        pass\n"
        "    else:\n        assert os.getuid() == 0, 'another uid read a capture file'\n")


def test_the_weaker_mode_gets_a_private_work_dir_and_capture_files(monkeypatch, system_python):
    monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "simulated")
    (as_is,) = execute_many([PEEK], timeout_s=5, allow_unisolated=True, limits=Limits(audit_hook=False))
    _weaker_mode_with_a_fresh_uid(monkeypatch, system_python)
    (fresh_uid,) = execute_many([PEEK + "assert os.getuid() != 0\n"], timeout_s=5, allow_unisolated=True,
                                limits=Limits(audit_hook=False))
    assert as_is.passed and fresh_uid.passed, (as_is, fresh_uid)


def test_the_weaker_mode_never_runs_a_sample_as_uid_0(monkeypatch):
    """As root without an interpreter an unprivileged uid can read, the weaker mode refuses (one line) instead
    of running the sample as uid 0; the plain refusal names the opt-in key."""
    monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "bwrap failed: simulated")
    with pytest.raises(SandboxUnavailable) as err:
        execute("pass\n", timeout_s=2)
    assert "\n" not in str(err.value) and sandbox.OPT_IN in str(err.value)
    if os.geteuid() != 0:
        pytest.skip("a plain user's weaker mode runs as that user")
    monkeypatch.setattr(sandbox, "_weak_python", lambda: None)
    with pytest.raises(SandboxUnavailable, match="would run model-written code as uid 0") as err:
        execute_many(["pass\n"], timeout_s=2, allow_unisolated=True)
    assert "\n" not in str(err.value)


SITE = "import yaml\nassert yaml.safe_load('a: 1') == {'a': 1}\n"


def test_site_packages_work_under_bwrap(mode):
    if mode == "weaker_mode":
        with pytest.raises(SandboxUnavailable, match=r"site_packages=True\) needs OS isolation"):
            execute_many([SITE], timeout_s=5, limits=Limits(site_packages=True), allow_unisolated=True)
        assert sandbox.require_isolation(True) == sandbox.WEAK
        return
    programs = [SITE]
    if mode == "two_bwrap":  # the harness's venv: packages with native code (numpy imports ctypes)
        programs.append("import numpy\nassert int(numpy.arange(4).sum()) == 6\n")
    results = execute_many(programs, timeout_s=20, limits=Limits(site_packages=True), workers=2)
    assert all(r.passed for r in results), [(r.status, r.reason) for r in results]


@pytest.mark.parametrize("path", ["two_bwrap", "one_bwrap"])
def test_hidden_data_files_are_only_those_in_the_view(path, use_bwrap_path):
    """/dev/null is bound only over data files the view shows: on the one-bwrap path with the system interpreter
    the venv is not bound, and binds over its files made bwrap create its folders in the sandbox's root (a venv
    under /tmp then kept /tmp from becoming the work dir's link: "Can't make symlink at /tmp: File exists")."""
    use_bwrap_path(path)
    argv = sandbox._sandbox_argv(sandbox._new_host_uid(), True, 64, package_data=False)
    hidden = [argv[i + 2] for i, word in enumerate(argv) if word == "--ro-bind" and argv[i + 1] == "/dev/null"]
    bound = [argv[i + 2] for i, word in enumerate(argv) if word == "--ro-bind" and argv[i + 1] != "/dev/null"]
    in_view = [f for f in sandbox.package_data_files(os.path.realpath(sys.prefix))
               if any(f == b or f.startswith(b.rstrip("/") + "/") for b in bound)]
    assert hidden == in_view
    if path == "two_bwrap":  # the venv is bound: every data file of it is hidden
        assert hidden == list(sandbox.package_data_files(os.path.realpath(sys.prefix)))


def test_bad_limits_are_refused_in_one_line():
    for bad in ({"memory_mb": 0}, {"processes": -1}, {"shm_mb": 1.5}, {"site_packages": "yes"}, {"work_mb": True}):
        with pytest.raises(ValueError, match=f"Limits\\({next(iter(bad))}="):
            Limits(**bad)
