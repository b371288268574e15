"""Running model-written Python in a fresh, limited process; it passes only if it reaches its last line.

Layers (each one alone stops the common failure modes; together they are defence in depth):
- a new network, PID and mount namespace via `unshare` when the OS allows it (no network; every
  process of the sample dies with it; the work directory is a size-capped tmpfs);
- resource limits set in the child (CPU time, address space, file size, process count, open files, no
  core dumps) and, when started as root, a switch to the `nobody` user so the process limit applies;
- a Python audit hook, which the program cannot remove, refusing sockets, subprocesses, forks, signals
  to other processes, ctypes, and writes or deletions outside the work directory;
- a scrubbed environment, a temporary working directory, capped captured output, a wall-clock limit;
- a random sentinel written after the program's last statement through a private pipe: `exit(0)`,
  `os._exit(0)`, `SystemExit` or a swallowed failure before the end cannot pass.

This is a guard against accidents and sloppy model output, not a security boundary for hostile code
(code running in the same interpreter could, with effort, find the sentinel).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

OUTPUT_CAP_BYTES = 8192

# Runs in the child (`python -I -c`): limits, namespaces' tmpfs, user switch, audit hook, then the program.
_BOOTSTRAP = r"""
import os, resource, sys
program, workdir, mem_mb, cpu_s, file_mb, nproc, use_tmpfs, drop_user = sys.argv[1:9]
def _lim(kind, value):
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        pass
if use_tmpfs == "1":
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount(b"none", b"/", None, 0x40000 | 0x4000, None)  # MS_PRIVATE|MS_REC: keep mounts local
    libc.mount(b"tmpfs", workdir.encode(), b"tmpfs", 0, ("size=%dm,mode=0777" % (4 * int(file_mb))).encode())
src = open(program, encoding="utf-8").read()
os.chdir(workdir)
_lim(resource.RLIMIT_AS, int(mem_mb) << 20)
_lim(resource.RLIMIT_CPU, int(cpu_s))
_lim(resource.RLIMIT_FSIZE, int(file_mb) << 20)
_lim(resource.RLIMIT_NOFILE, 64)
_lim(resource.RLIMIT_CORE, 0)
_lim(resource.RLIMIT_NPROC, int(nproc))
if os.geteuid() == 0 and drop_user == "1":
    try:
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
    except OSError:
        pass  # inside a user namespace mapped to an unprivileged user: limits already apply
_root = os.path.realpath(workdir)
_blocked = ("socket.", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system",
            "subprocess.", "os.kill", "os.killpg", "ctypes.", "pty.")
def _outside(path):
    if isinstance(path, int):
        return False
    p = os.path.realpath(os.fsdecode(path))
    return not (p == _root or p.startswith(_root + os.sep) or p == "/dev/null")
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        if isinstance(path, (str, bytes)) and os.fsdecode(path).startswith("/proc/") and os.fsdecode(path).endswith("environ"):
            raise PermissionError("sandbox: reading process environments is not allowed")
        if path is not None and (flags & _WRITE or (mode and any(c in mode for c in "wax+"))) and _outside(path):
            raise PermissionError("sandbox: writing outside the work directory is not allowed: %r" % (path,))
    elif event in ("os.remove", "os.rmdir", "os.rename", "os.truncate", "shutil.rmtree", "os.chmod",
                   "os.chown", "os.link", "os.symlink"):
        if any(_outside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))):
            raise PermissionError("sandbox: %s outside the work directory is not allowed" % event)
    elif event.startswith(_blocked):
        raise PermissionError("sandbox: %s is not allowed" % event)
sys.addaudithook(_hook)
import builtins
if not hasattr(builtins, "exit"):  # `python -S` skips site, which defines exit/quit
    builtins.exit = builtins.quit = sys.exit
sys.argv = [program]
exec(compile(src, "program.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one program: `passed` only when the sentinel after its last line arrived intact.

    status: "passed", "failed" (an exception), "timeout" (wall clock), "killed" (a signal: CPU, memory,
    file size), "no_sentinel" (the program exited before its end, e.g. `exit(0)`), or "error" (could not
    start). `reason` is the last line of stderr or the limit hit.
    """

    passed: bool
    status: str
    reason: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_time_s: float
    isolation: str


@dataclass(frozen=True)
class Limits:
    """Resource limits for one program."""

    memory_mb: int = 2048
    file_mb: int = 16
    processes: int = 64
    site_packages: bool = False  # False: stdlib only (`python -S`), which starts ~3x faster


@lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...]:
    """The `unshare` command that gives a new network+PID+mount namespace here, or () when none works."""
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    base = (exe, "--net", "--pid", "--mount", "--mount-proc", "--fork", "--kill-child")
    candidates = [base] if os.geteuid() == 0 else []
    candidates.append((exe, "--user", "--map-root-user", *base[1:]))
    for prefix in candidates:
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return prefix
    return ()


@lru_cache(maxsize=1)
def _nobody_can_run_python() -> bool:
    """Can the `nobody` user read this interpreter's stdlib and packages? (not when they live under /root)."""
    import stat

    for top in {Path(os.__file__).parent, Path(sys.prefix), Path(__file__).parent}:
        for d in [top.resolve(), *top.resolve().parents]:
            mode = d.stat().st_mode
            if not (mode & stat.S_IXOTH and mode & stat.S_IROTH):
                return False
    return True


def _read_capped(path: Path, cap: int = OUTPUT_CAP_BYTES) -> str:
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    text = data[:cap].decode("utf-8", errors="replace")
    return text + ("\n[output truncated]" if len(data) > cap else "")


def _classify(returncode: int | None, sentinel_ok: bool, timed_out: bool, stderr: str) -> tuple[str, str]:
    if timed_out:
        return "timeout", "wall-clock limit reached"
    if returncode is not None and returncode < 0:
        import signal

        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(returncode)
        return "killed", f"killed by {name} (a resource limit: CPU, memory or file size)"
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    if returncode == 137 or returncode == 128 + 9:
        return "killed", "killed by SIGKILL (a resource limit)"
    if returncode not in (0, None):
        return "failed", last or f"exit status {returncode}"
    if not sentinel_ok:
        return "no_sentinel", "the program stopped before its last line (exit/SystemExit?)"
    return "passed", ""


def execute(program: str, timeout_s: float = 10.0, limits: Limits | None = None) -> ExecResult:
    """Run `program` in a fresh sandboxed Python process; passed = it ran to its end within the limits."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number of seconds")
    limits = limits or Limits()
    nonce = secrets.token_hex(16)
    prefix = namespace_prefix()
    isolation = "namespaces" if prefix else "rlimits+audit"
    root = Path(tempfile.mkdtemp(prefix="dllm_sandbox_"))
    workdir = root / "work"
    workdir.mkdir()
    program_file = root / "program.py"
    read_fd, write_fd = os.pipe()
    program_file.write_text(f"{program}\n\n__import__('os').write({write_fd}, b'{nonce}')\n", encoding="utf-8")
    os.chmod(root, 0o755)
    os.chmod(workdir, 0o777)
    os.chmod(program_file, 0o644)
    out_path, err_path = root / "stdout", root / "stderr"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8"}
    python = (sys.executable, "-I") if limits.site_packages else (sys.executable, "-I", "-S")
    cmd = [
        *prefix, *python, "-c", _BOOTSTRAP, str(program_file), str(workdir), str(limits.memory_mb), str(int(timeout_s) + 1), str(limits.file_mb), str(limits.processes),
        "1" if prefix else "0", "1" if _nobody_can_run_python() else "0",
    ]
    start = time.perf_counter()
    timed_out = False
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=str(workdir),
                    start_new_session=True, pass_fds=(write_fd,),
                )
            except OSError as e:
                return ExecResult(False, "error", f"could not start: {e}", None, "", "", 0.0, isolation)
            os.close(write_fd)
            write_fd = -1
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
        wall = time.perf_counter() - start
        sentinel = _drain(read_fd)
        stdout, stderr = _read_capped(out_path), _read_capped(err_path)
        status, reason = _classify(None if timed_out else proc.returncode, sentinel == nonce.encode(), timed_out, stderr)
        return ExecResult(status == "passed", status, reason, proc.returncode, stdout, stderr, wall, isolation)
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        os.close(read_fd)
        shutil.rmtree(root, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
    proc.wait()


def _drain(fd: int, cap: int = 256) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, cap)
    except BlockingIOError:
        return b""


def execute_many(
    programs: list[str], timeout_s: float = 10.0, workers: int | None = None, limits: Limits | None = None
) -> list[ExecResult]:
    """`execute` over many programs with `workers` concurrent processes; results in input order."""
    workers = workers or max(1, (os.cpu_count() or 1))
    if workers < 1:
        raise ValueError(f"workers={workers!r}: expected an int >= 1")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda p: execute(p, timeout_s, limits), programs))
