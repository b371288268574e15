"""The sandbox: clean failures with a reason for hostile or broken programs, and the host left untouched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dllm_bench.tasks import sandbox
from dllm_bench.tasks.sandbox import execute, execute_many

OK = "def f(x):\n    return x + 1\nassert f(1) == 2\n"

ADVERSARIAL = {
    "infinite_loop": ("while True:\n    pass\n", {"timeout"}),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()\n", {"failed", "killed", "timeout"}),
    "subprocess_bomb": ("import subprocess, sys\nwhile True:\n    subprocess.Popen([sys.executable, '-c', 'pass'])\n",
                        {"failed", "killed", "timeout"}),
    "memory_bomb": ("x = bytearray(64 * 1024 ** 3)\n", {"failed", "killed"}),
    "memory_growth": ("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 ** 2))\n",
                      {"failed", "killed", "timeout"}),
    "disk_filler": ("with open('fill.bin', 'wb') as f:\n    while True:\n        f.write(b'x' * 2 ** 20)\n",
                    {"failed", "killed"}),
    "early_exit": ("exit(0)\nassert False\n", {"no_sentinel"}),
    "os_exit": ("import os\nos._exit(0)\nassert False\n", {"no_sentinel"}),
    "system_exit": ("raise SystemExit(0)\nassert False\n", {"no_sentinel"}),
    "swallowing_excepthook": ("import sys\nsys.excepthook = lambda *a: None\nassert 1 == 2\n", {"failed"}),
    "override_builtins": ("import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
                          "builtins.print = None\nassert 1 == 2, 'still checked'\n", {"failed"}),
    "deep_recursion": ("import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n",
                       {"failed", "killed", "timeout"}),
    "output_flood": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", {"failed", "killed", "timeout"}),
    "network": ("import socket\ns = socket.create_connection(('127.0.0.1', PORT), timeout=2)\ns.sendall(b'hi')\n",
                {"failed"}),
}


@pytest.fixture(scope="module")
def listener(loopback):
    """A host TCP server: no sandboxed program may reach it."""
    with loopback(4) as (port, hits):
        yield port, hits


@pytest.fixture(params=["bwrap", "rlimits+audit"])
def isolation(request, monkeypatch):
    """Run a test with OS isolation and with the opted-in weaker mode (isolation simulated unavailable)."""
    if request.param == "rlimits+audit":
        monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "simulated")
    return request.param


def test_passing_and_failing_programs():
    good, bad, error = execute_many([OK, OK + "assert f(2) == 4\n", "def broken(:\n"], timeout_s=10, workers=3)
    assert good.passed and good.status == "passed"
    assert not bad.passed and bad.status == "failed" and "AssertionError" in bad.reason
    assert not error.passed and "SyntaxError" in error.reason


def test_adversarial_programs_fail_cleanly(listener, isolation):
    port, hits = listener
    names = list(ADVERSARIAL)
    programs = [ADVERSARIAL[n][0].replace("PORT", str(port)) for n in names]
    results = execute_many(programs, timeout_s=3, workers=4, allow_unisolated=True, wall_timeout_s=10)
    for name, result in zip(names, results):
        assert not result.passed, name
        assert result.status in ADVERSARIAL[name][1], (name, result.status, result.reason)
        assert result.reason, name
        assert len(result.stdout) < 20_000 and len(result.stderr) < 20_000, name
        assert result.isolation == isolation
    assert hits == []


def test_host_files_and_environment_are_out_of_reach(tmp_path, monkeypatch, isolation):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    outside = tmp_path / "created_by_sandbox.txt"
    monkeypatch.setenv("DLLM_SECRET_TOKEN", "s3cr3t-value")
    programs = {
        "delete": f"import os\nos.remove({str(victim)!r})\n",
        "overwrite": f"open({str(victim)!r}, 'w').write('gone')\n",
        "create": f"open({str(outside)!r}, 'w').write('x')\n",
        "rmtree": f"import shutil\nshutil.rmtree({str(tmp_path)!r})\n",
        "env": "import os\nassert 'DLLM_SECRET_TOKEN' in os.environ\n",
        "parent_env": ("import os\nfor p in (os.getppid(), 1):\n    data = open(f'/proc/{p}/environ', 'rb').read()\n"
                       "    assert b's3cr3t-value' in data\n"),
        "parent_env_scan": ("import os\nhits = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
                            "        try:\n            hits.append(b's3cr3t' in open(f'/proc/{p}/environ', 'rb').read())\n"
                            "        except OSError:\n            pass\nassert any(hits)\n"),
    }
    results = execute_many(list(programs.values()), timeout_s=10, workers=4, allow_unisolated=True)
    for name, result in zip(programs, results):
        assert not result.passed, (name, result.status, result.stdout)
    assert victim.read_text() == "keep me"
    assert not outside.exists()


def test_work_directory_is_usable_and_removed():
    program = ("import os\nopen('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'\n"
               "print(os.getcwd())\n")
    result = execute(program, timeout_s=10)
    assert result.passed, result
    assert not Path(result.stdout.strip()).exists() or result.stdout.strip() == ""


def test_wall_clock_backstop_is_kept():
    result = execute("import time\ntime.sleep(30)\n", timeout_s=1, wall_timeout_s=2)
    assert result.status == "timeout" and "wall-clock backstop" in result.reason


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="timeout_s"):
        execute(OK, timeout_s=0)
    with pytest.raises(ValueError, match="workers"):
        execute_many([OK], timeout_s=1, workers=-1)
    with pytest.raises(ValueError, match="wall_timeout_s"):
        execute(OK, timeout_s=1, wall_timeout_s=0)


def test_no_stray_processes_after_timeout():
    marker = f"dllm-sandbox-marker-{os.getpid()}"
    execute(f"import os\nos.execv('/bin/sleep', ['sleep', '60', {marker!r}])\n", timeout_s=1, wall_timeout_s=1)
    leftover = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                leftover.append(pid)
        except OSError:
            continue
    assert leftover == []
