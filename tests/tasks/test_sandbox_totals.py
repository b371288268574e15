"""The sandbox bounds a sample, not a process: memory, CPU time and processes summed per sample (cgroup), SysV
shared memory refused, /dev/shm and the work dir sized, /dev read-only; no process outlives `execute` or the
harness (SIGKILL, Ctrl-C, an exception). Each case runs on the two-bwrap path (root, interpreter under a 0700
home) and the one-bwrap path (an interpreter any user can read), limits scaled down; the rlimit fallback
(no writable cgroup) keeps its documented bounds. Every process a test starts is killed by pid."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dllm_bench.tasks import sandbox, sandbox_cgroup
from dllm_bench.tasks.sandbox import Limits, execute, execute_many

ROOT = Path(__file__).resolve().parents[2]
HOOK_OFF = Limits(audit_hook=False)


@pytest.fixture(params=["two_bwrap", "one_bwrap"])
def bwrap_path(request, use_bwrap_path) -> str:
    use_bwrap_path(request.param)
    return request.param


@pytest.fixture
def no_cgroup(monkeypatch) -> None:
    """The fallback: no writable cgroup hierarchy."""
    monkeypatch.setattr(sandbox_cgroup, "hierarchies", lambda: ())


def _needs_cgroup() -> None:
    if not {"memory", "pids", "cpu"} <= sandbox_cgroup.capabilities():
        pytest.skip(f"no per-sample cgroup here (has: {sorted(sandbox_cgroup.capabilities())}); the fallback's "
                    "tests cover this machine")


def _new_mark() -> str:
    """A number `sleep` adds to its 60 s (it sums its arguments) that no other command line holds."""
    return f"0.{secrets.randbelow(10**12):012d}1"


def _marked(mark: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _sample_cgroups() -> list[Path]:
    return [p for h in sandbox_cgroup.hierarchies() for p in h.parent.glob(f"{sandbox_cgroup.PREFIX}{os.getpid()}-*")]


# ---- per-sample totals -----------------------------------------------------------------------------------

CHILDREN_TOUCH = (  # 3 children of 120 MB each: under a 200 MB per-process limit, over a 200 MB total
    "import os, time\npids = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
    "        block = bytearray(120 << 20)\n        for i in range(0, len(block), 4096):\n            block[i] = 1\n"
    "        time.sleep(1)\n        os._exit(0)\n    pids.append(pid)\n"
    "codes = [os.waitpid(p, 0)[1] for p in pids]\nassert codes == [0, 0, 0], codes\n"
)
SPINNERS = "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n"
FORK_COUNT = ("import os, time\nn = 0\ntry:\n    while n < 100:\n        if os.fork() == 0:\n            time.sleep(3)\n"
              "            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)\n")
SYSV_SHM = ("import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "assert libc.shmget(0, 1 << 20, 0o1000 | 0o600) == -1 and ctypes.get_errno() == errno.EPERM\n")
SHM_AND_DEV = (  # /dev/shm holds 2 MB, not 3; /dev is read-only
    "import errno\ntry:\n    with open('/dev/shm/fill', 'wb') as f:\n        f.write(b'x' * (3 << 20))\n"
    "except OSError as e:\n    assert e.errno == errno.ENOSPC, e\nelse:\n    raise AssertionError('/dev/shm not sized')\n"
    "try:\n    open('/dev/created', 'w')\nexcept OSError as e:\n    assert e.errno == errno.EROFS, e\n"
    "else:\n    raise AssertionError('/dev writable')\n"
)
WORK_DIR_FULL = ("import errno\ntry:\n    with open('fill', 'wb') as f:\n        f.write(b'x' * (5 << 20))\n"
                 "except OSError as e:\n    assert e.errno == errno.ENOSPC, e\nelse:\n    raise AssertionError('unsized')\n")
SMALL = Limits(audit_hook=False, memory_mb=200, processes=8, file_mb=8, work_mb=4, shm_mb=2)


def test_memory_cpu_and_processes_are_bounded_for_the_whole_sample(bwrap_path):
    _needs_cgroup()
    memory, cpu, forks = execute_many([CHILDREN_TOUCH, SPINNERS, FORK_COUNT], timeout_s=1, workers=3, limits=SMALL,
                                      wall_timeout_s=60)
    assert not memory.passed and memory.status in ("failed", "killed"), memory
    assert (cpu.status, cpu.reason) == ("timeout", "CPU-time limit of 1 s reached by the sample's processes together")
    assert forks.passed and 0 < int(forks.stdout) < SMALL.processes, forks
    assert _sample_cgroups() == []


def test_the_limits_are_per_sample_not_per_machine(bwrap_path):
    """The same programs pass with the default limits: the bounds above come from the lowered limits."""
    _needs_cgroup()
    memory, forks = execute_many([CHILDREN_TOUCH, FORK_COUNT.replace("n < 100", "n < 6")], timeout_s=5, workers=2,
                                 limits=HOOK_OFF)
    assert memory.passed, memory
    assert forks.passed and forks.stdout.strip() == "6", forks


def test_shared_memory_dev_and_work_dir_are_sized(bwrap_path):
    results = execute_many([SYSV_SHM, SHM_AND_DEV, WORK_DIR_FULL], timeout_s=5, workers=3, limits=SMALL)
    assert [r.status for r in results] == ["passed"] * 3, [(r.status, r.reason) for r in results]


def test_the_fallback_without_a_cgroup_keeps_its_bounds(no_cgroup, use_bwrap_path):
    """No writable cgroup: processes per uid (RLIMIT_NPROC), SysV shm refused, /dev/shm, /dev and the work dir
    as on the cgroup path; each process's own CPU time. What it cannot bound (memory and CPU summed) is in
    docs/sandbox.md."""
    use_bwrap_path("two_bwrap")
    assert sandbox_cgroup.SampleCgroup.create(1 << 30, 10) is None
    results = execute_many([FORK_COUNT, SYSV_SHM, SHM_AND_DEV, WORK_DIR_FULL, "while True:\n    pass\n"], timeout_s=1,
                           workers=3, limits=SMALL, wall_timeout_s=60)
    forks, *sized, spinner = results
    assert forks.passed and 0 < int(forks.stdout) < SMALL.processes, forks
    assert [r.status for r in sized] == ["passed"] * 3, [(r.status, r.reason) for r in sized]
    assert (spinner.status, spinner.reason) == ("timeout", "CPU-time limit of 1 s reached")


# ---- lifetime --------------------------------------------------------------------------------------------

DAEMONS = ("import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
           "        os.execv('/bin/sleep', ['sleep', '60', MARK])\n    os._exit(0)\n"
           "os.execv('/bin/sleep', ['sleep', '61', MARK])\n")
# The harness takes Ctrl-C as an interactive shell delivers it, whatever the test process inherited: a background
# job of a non-interactive shell (`make test &`) starts with SIGINT ignored, and a child would inherit that.
HARNESS = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from dllm_bench.tasks import sandbox, sandbox_cgroup
path, python, cgroup, program = sys.argv[1:5]
if path == "two_bwrap":
    sandbox._traversable = lambda directory: False
else:
    sandbox._python_argv = lambda site: [python, "-I", "-S"]
    sandbox._python_roots = lambda site: []
if cgroup == "off":
    sandbox_cgroup.hierarchies = lambda: ()
sandbox.execute_many([program] * 2, timeout_s=30, workers=2, limits=sandbox.Limits(audit_hook=False))
"""


def _wait_for(predicate, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_no_sample_outlives_the_harness(bwrap_path, how, system_python):
    mark = _new_mark()
    program = DAEMONS.replace("MARK", repr(mark))
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, bwrap_path, system_python, "on", program],
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        assert _wait_for(lambda: len(_marked(mark)) >= 4, 60), "the samples' daemons never started"
        harness.send_signal(getattr(signal, how))
        harness.wait(timeout=30)
        gone_at = time.monotonic()
        assert _wait_for(lambda: not _marked(mark), 1.0), f"alive {time.monotonic() - gone_at:.2f} s after: {_marked(mark)}"
    finally:
        _kill([harness.pid])
        harness.wait(timeout=30)
        _kill(_marked(mark))


def test_no_sample_outlives_a_killed_harness_without_a_cgroup(system_python):
    """The fallback on the two-bwrap path: the first bwrap's own PID namespace dies with the harness."""
    if os.geteuid() != 0 or not sandbox._python_roots(False):
        pytest.skip("the two-bwrap path needs root and an interpreter outside /usr")
    mark = _new_mark()
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, "two_bwrap", system_python, "off",
                                DAEMONS.replace("MARK", repr(mark))], env={**os.environ, "PYTHONPATH": str(ROOT)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for(lambda: len(_marked(mark)) >= 4, 60), "the samples' daemons never started"
        harness.kill()
        harness.wait(timeout=30)
        assert _wait_for(lambda: not _marked(mark), 1.0), _marked(mark)
    finally:
        _kill([harness.pid])
        harness.wait(timeout=30)
        _kill(_marked(mark))


def test_no_sample_outlives_an_exception_in_execute(bwrap_path, monkeypatch):
    mark = _new_mark()
    feed = sandbox._feed

    def feed_then_fail(proc, data):
        feed(proc, data)
        _wait_for(lambda: len(_marked(mark)) >= 2, 30)
        raise RuntimeError("the harness failed mid-sample")

    monkeypatch.setattr(sandbox, "_feed", feed_then_fail)
    try:
        with pytest.raises(RuntimeError, match="mid-sample"):
            execute(DAEMONS.replace("MARK", repr(mark)), timeout_s=30, limits=HOOK_OFF)
        assert _marked(mark) == [] and _sample_cgroups() == []
    finally:
        _kill(_marked(mark))


def test_an_interrupted_execute_many_starts_nothing_more(monkeypatch):
    """Ctrl-C (any exception) in execute_many: queued programs never start, running ones are killed."""
    started = []
    run = sandbox.execute

    def spy(program, *args, **kwargs):
        started.append(program)
        if len(started) == 2:
            raise KeyboardInterrupt
        return run(program, *args, **kwargs)

    monkeypatch.setattr(sandbox, "execute", spy)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        execute_many(["import time\ntime.sleep(60)\n"] * 6, timeout_s=30, workers=2, limits=HOOK_OFF)
    assert time.monotonic() - t0 < 10 and len(started) <= 3


def test_what_a_dead_harness_left_is_killed_and_removed_on_the_next_start(tmp_path):
    """bwrap's child can hang forever if its launcher dies before releasing it (the harness killed in that
    instant): such a process and its cgroups, and the harness's temp dirs, go when the next harness starts."""
    _needs_cgroup()
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"{sandbox_cgroup.PREFIX}{dead.pid}-{secrets.token_hex(6)}"
    stale = sandbox_cgroup.SampleCgroup([(h, h.parent / name) for h in sandbox_cgroup.hierarchies()])
    for _, path in stale.dirs:
        path.mkdir()
    mark = _new_mark()
    stuck = subprocess.Popen(stale.join_argv(["/bin/sleep", "60", mark]))
    temp = Path(sandbox.tempfile.gettempdir()) / f"{sandbox.TEMP_PREFIX}{dead.pid}_stale"
    temp.mkdir()
    os.utime(temp, (time.time() - 3600, time.time() - 3600))
    try:
        assert _wait_for(lambda: bool(stale.members()) and "sleep" in Path(f"/proc/{stuck.pid}/cmdline").read_text(), 10)
        sandbox_cgroup._swept.cache_clear()
        sandbox._remove_stale_dirs.cache_clear()
        assert execute("pass\n", timeout_s=5).passed
        assert stuck.wait(timeout=5) == -signal.SIGKILL
        assert not any(path.exists() for _, path in stale.dirs) and not temp.exists()
    finally:
        _kill([stuck.pid])
        stuck.wait(timeout=30)
        stale.remove()
        if temp.exists():
            temp.rmdir()


STUCK_HARNESS = """
import subprocess, sys, time
from dllm_bench.tasks import sandbox_cgroup
cgroup = sandbox_cgroup.SampleCgroup.create(1 << 30, 10)
sandbox_cgroup.start_watchdog("/nonexistent/none_*")
stuck = subprocess.Popen(cgroup.join_argv(["/bin/sleep", "60", sys.argv[1]]), start_new_session=True)
print(" ".join(str(p) for _, p in cgroup.dirs), flush=True)
time.sleep(60)
"""


def test_a_watchdog_ends_what_a_harness_killed_mid_start_left():
    """A process the harness's death cannot reach (as bwrap's child before its launcher released it): the
    harness's watchdog kills it within a second and removes the sample's cgroups."""
    _needs_cgroup()
    mark = _new_mark()
    harness = subprocess.Popen([sys.executable, "-c", STUCK_HARNESS, mark], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        dirs = [Path(p) for p in harness.stdout.readline().split()]
        assert dirs and _wait_for(lambda: [p for p in _marked(mark) if p != harness.pid], 10)
        harness.kill()
        harness.wait(timeout=30)
        assert _wait_for(lambda: not _marked(mark) and not any(d.exists() for d in dirs), 1.0), _marked(mark)
    finally:
        _kill([harness.pid, *_marked(mark)])
        harness.wait(timeout=30)
