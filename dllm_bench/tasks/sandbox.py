"""Running model-written Python in an OS-isolated, limited process; it passes only if it reaches its last line.

Isolation is the operating system's, via bubblewrap (`bwrap`, docs/sandbox.md says why): own user, network,
PID, mount, IPC and UTS namespaces; an unprivileged host uid of its own (a fresh one per sample when the
harness is root) with no capabilities; a read-only view of only /usr and the interpreter; a private tmpfs
work dir; its own /proc; every process gone when the sample ends. Inside, rlimits (CPU time, address
space, file size, processes) bound it, and an audit hook gives clear errors on common accidents (a second
layer: nothing above depends on it). Without bwrap, execution refuses unless `allow_unisolated=True`.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

OUTPUT_CAP_BYTES = 8192
NONCE_BYTES = 32
SANDBOX_ID = 65534  # uid/gid the program sees (nobody); on the host it is an unprivileged id of its own
HOST_UID_BASE, HOST_UID_SPAN = 2_000_000_000, 140_000_000  # per-sample host uids (root harness), < 2**31
OPT_IN = "task.allow_unisolated=true"
WORKDIR = "/sandbox"  # the program's private tmpfs (and its /tmp); a path no interpreter prefix uses
FULL, WEAK = "bwrap", "rlimits+audit"

# Runs inside the sandbox as `python -I [-S] -c`; stdin carries the nonce, then the program. The nonce
# stays in this function's frame (never in a file, argv, the environment, /proc or an inherited fd).
_BOOTSTRAP = r"""
def _run():
    import os, resource, sys, types
    report_fd, mem_mb, cpu_s, file_mb, nproc, hook = (int(a) for a in sys.argv[1:7])
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    data = b"".join(chunks)
    nonce, src = data[:NONCE_BYTES], data[NONCE_BYTES:].decode("utf-8")
    del chunks, data
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    code = compile(src, "program.py", "exec")
    for kind, value in ((resource.RLIMIT_AS, mem_mb << 20), (resource.RLIMIT_FSIZE, file_mb << 20),
                        (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, nproc)):
        try:
            resource.setrlimit(kind, (value, value))
        except (ValueError, OSError):
            pass
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))  # SIGXCPU, then SIGKILL if ignored
    if hook:
        _install_hook(os.getcwd())
    import builtins
    if not hasattr(builtins, "exit"):  # `python -S` skips site, which defines exit/quit
        builtins.exit = builtins.quit = sys.exit
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv = ["program.py"]
    exec(code, main.__dict__)
    os.write(report_fd, nonce)

def _install_hook(root):
    import os, sys
    blocked = ("socket.", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system",
               "subprocess.", "os.kill", "os.killpg", "ctypes.", "pty.")
    write = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    def outside(path):
        if isinstance(path, int):
            return False
        p = os.path.realpath(os.fsdecode(path))
        return not (p == root or p.startswith(root + os.sep) or p == "/dev/null")
    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if isinstance(path, (str, bytes)) and os.fsdecode(path).startswith("/proc/") \
                    and os.fsdecode(path).endswith("environ"):
                raise PermissionError("sandbox: reading process environments is not allowed")
            if path is not None and (flags & write or (mode and any(c in mode for c in "wax+"))) and outside(path):
                raise PermissionError("sandbox: writing outside the work directory is not allowed: %r" % (path,))
        elif event in ("os.remove", "os.rmdir", "os.rename", "os.truncate", "shutil.rmtree", "os.chmod",
                       "os.chown", "os.link", "os.symlink", "os.mkdir"):
            if any(outside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))):
                raise PermissionError("sandbox: %s outside the work directory is not allowed" % event)
        elif event.startswith(blocked):
            raise PermissionError("sandbox: %s is not allowed" % event)
    sys.addaudithook(hook)

_run()
""".replace("NONCE_BYTES", str(NONCE_BYTES))


class SandboxUnavailable(RuntimeError):
    """OS isolation cannot be set up here and the weaker mode was not opted into."""


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one program: `passed` only when the nonce after its last line arrived intact.

    status: "passed", "failed" (an exception), "timeout" (CPU-time limit or wall-clock backstop), "killed"
    (a signal: memory, file size, processes), "no_sentinel" (the program stopped before its end, e.g.
    `exit(0)`), or "error" (could not start). `reason` is the last line of stderr or the limit hit;
    `isolation` is "bwrap" (OS isolation) or "rlimits+audit" (the opted-in weaker mode).
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
    """Resource limits for one program; `audit_hook=False` drops the in-interpreter layer (tests use it)."""

    memory_mb: int = 2048
    file_mb: int = 16
    processes: int = 64
    site_packages: bool = False  # False: stdlib only (`python -S`), which starts ~3x faster
    audit_hook: bool = True


def default_wall_timeout(timeout_s: float) -> float:
    """The wall-clock backstop for a CPU-time limit: generous, for a loaded machine (3x + 10 s)."""
    return 3.0 * timeout_s + 10.0


def _python_argv(site_packages: bool) -> list[str]:
    """The venv's interpreter (by its real directory, which is what gets bound) with packages, else the base one."""
    if site_packages:
        return [os.path.join(os.path.realpath(sys.prefix), "bin", os.path.basename(sys.executable)), "-I"]
    return [os.path.realpath(sys.executable), "-I", "-S"]


def _python_roots(site_packages: bool) -> list[str]:
    """Host directories the interpreter needs (read-only): its prefix and, with packages, the venv."""
    roots = [os.path.realpath(sys.base_prefix)]
    if site_packages:
        roots.append(os.path.realpath(sys.prefix))
    return sorted({r for r in roots if not (r == "/usr" or r.startswith("/usr/"))})


def _root_view(roots: list[str], restore_modes: bool) -> list[str]:
    """bwrap options for the read-only host view: /usr, its merged-/usr links, and `roots` at their paths."""
    opts = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            opts += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            opts += ["--ro-bind", top, top]
    for root in roots:
        opts += ["--ro-bind", root, root]
    if restore_modes:  # bwrap copies the modes of a source's parents (/root is 0700): make them traversable
        parents = {str(p) for r in roots for p in Path(r).parents if str(p) != "/"}
        for parent in sorted(parents, key=len):
            opts += ["--chmod", "0755", parent]
    return opts


def _sandbox_argv(host_uid: int | None, site_packages: bool, work_mb: int, info_fd: int | None = None) -> list[str]:
    """The command prefix that runs a program under bwrap; as root, a first bwrap (mount view only) drops to
    `host_uid` with setpriv so the second, unprivileged bwrap can traverse a prefix under a 0700 home."""
    bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
    roots = _python_roots(site_packages)
    inner = [
        bwrap, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
        "--unshare-cgroup-try", *_optional_flags(bwrap), "--die-with-parent", "--new-session",
        "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID), "--hostname", "sandbox",
        *_root_view(roots, restore_modes=False),
        "--proc", "/proc", "--dev", "/dev", "--size", str(work_mb << 20), "--tmpfs", WORKDIR,
        *([] if any(r.startswith("/tmp/") for r in roots) else ["--symlink", WORKDIR, "/tmp"]),
        "--chdir", WORKDIR, "--remount-ro", "/",
        *([] if info_fd is None else ["--info-fd", str(info_fd)]),
    ]
    if host_uid is None:
        return inner
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    drop = [setpriv, f"--reuid={host_uid}", f"--regid={host_uid}", "--clear-groups", "--"]
    if all(_traversable(r) for r in roots):
        return [*drop, *inner]
    return [
        bwrap, *_root_view(roots, restore_modes=True), "--bind", "/proc", "/proc", "--dev", "/dev",
        "--tmpfs", "/tmp", "--die-with-parent", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
        "--cap-add", "CAP_SETGID", *drop, *inner,
    ]


@lru_cache(maxsize=4)
def _optional_flags(bwrap: str) -> tuple[str, ...]:
    """`--disable-userns` where this bwrap has it (0.8+): the program cannot create user namespaces of its own."""
    try:
        helptext = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return ("--disable-userns",) if "--disable-userns" in helptext else ()


def _new_host_uid() -> int | None:
    """A fresh unprivileged host uid when the harness is root (so RLIMIT_NPROC is per sample), else None."""
    return HOST_UID_BASE + secrets.randbelow(HOST_UID_SPAN) if os.geteuid() == 0 else None


@lru_cache(maxsize=1)
def isolation_unavailable_reason() -> str | None:
    """Why OS isolation cannot be set up here (None when it works): bwrap missing, or a probe that failed."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed (`apt-get install -y bubblewrap`; `make setup` does it as root)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    probe = "import os\nos.write(1, b'%d' % os.getuid())\n"
    cmd = [*_sandbox_argv(_new_host_uid(), False, 1), *_python_argv(False), "-c", probe]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=60, env=_scrubbed_env(WORKDIR),
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        return f"bwrap could not start ({e})"
    if done.returncode != 0 or done.stdout != str(SANDBOX_ID).encode():
        last = (done.stderr.decode(errors="replace").strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"bwrap failed: {last}"
    return None


def require_isolation(allow_unisolated: bool = False) -> str:
    """The isolation `execute` will use ("bwrap" or "rlimits+audit"); raises SandboxUnavailable when it would
    refuse. Cheap after the first call: runners call it before loading a model."""
    reason = isolation_unavailable_reason()
    if reason is None:
        return FULL
    if allow_unisolated:
        return WEAK
    raise SandboxUnavailable(
        f"sandbox: cannot isolate model-written code: {reason}; to run it with rlimits and an audit hook only, "
        f"opt in with {OPT_IN} (execute(..., allow_unisolated=True))"
    )


def _scrubbed_env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}


@lru_cache(maxsize=16)
def _traversable(directory: str) -> bool:
    """Can any user reach `directory` (read+search on it and every parent)? Not under a 0700 /root."""
    top = Path(directory).resolve()
    return all(d.stat().st_mode & stat.S_IXOTH and d.stat().st_mode & stat.S_IROTH for d in [top, *top.parents])


def _others_can_run_python() -> bool:
    """Can an unprivileged user read this interpreter's stdlib and prefix?"""
    return _traversable(str(Path(os.__file__).parent)) and _traversable(sys.prefix)


@lru_cache(maxsize=1)
def _hide_own_environ() -> None:
    """Weaker mode as a plain user: a program runs with our uid, so make this process non-dumpable, which
    makes its /proc/<pid>/environ (and memory) unreadable to same-uid processes. No core dumps afterwards."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def _read_capped(path: Path, cap: int = OUTPUT_CAP_BYTES) -> str:
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    text = data[:cap].decode("utf-8", errors="replace")
    return text + ("\n[output truncated]" if len(data) > cap else "")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _classify(returncode: int | None, sentinel_ok: bool, backstop: float | None, cpu_s: int,
              stderr: str) -> tuple[str, str]:
    """(status, reason). bwrap reports a signal death as 128 + signal; the weaker mode as a negative code."""
    if backstop is not None:
        return "timeout", f"wall-clock backstop of {backstop:g} s reached (the program slept or blocked)"
    sig = -returncode if returncode is not None and returncode < 0 else None
    if returncode is not None and 128 < returncode < 128 + 65:
        sig = returncode - 128
    if sig == signal.SIGXCPU:
        return "timeout", f"CPU-time limit of {cpu_s} s reached"
    if sig == signal.SIGKILL:
        return "killed", f"killed by SIGKILL (the CPU-time hard limit of {cpu_s + 1} s once SIGXCPU is ignored, or memory)"
    if sig is not None:
        return "killed", f"killed by {_signal_name(sig)} (a resource limit: memory, file size or processes)"
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    if returncode not in (0, None):
        return "failed", last or f"exit status {returncode}"
    if not sentinel_ok:
        return "no_sentinel", "the program stopped before its last line (exit/SystemExit?)"
    return "passed", ""


def execute(program: str, timeout_s: float = 10.0, limits: Limits | None = None, *,
            allow_unisolated: bool = False, wall_timeout_s: float | None = None) -> ExecResult:
    """Run `program` in a fresh isolated Python process; passed = it ran to its end within the limits.

    `timeout_s` is CPU time (RLIMIT_CPU, whole seconds, rounded up); `wall_timeout_s` is a backstop for
    programs that sleep or block (default `default_wall_timeout(timeout_s)`).
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number of seconds")
    if wall_timeout_s is not None and not wall_timeout_s > 0:
        raise ValueError(f"wall_timeout_s={wall_timeout_s!r}: expected a positive number of seconds or None")
    limits = limits or Limits()
    isolation = require_isolation(allow_unisolated)
    cpu_s = max(1, int(-(-timeout_s // 1)))
    backstop = wall_timeout_s if wall_timeout_s is not None else default_wall_timeout(timeout_s)
    nonce = secrets.token_hex(NONCE_BYTES // 2).encode()
    root = Path(tempfile.mkdtemp(prefix="dllm_sandbox_"))
    read_fd, write_fd = os.pipe()
    info_read, info_write = os.pipe()
    try:
        if isolation == FULL:
            host_uid = _new_host_uid()
            prefix = _sandbox_argv(host_uid, limits.site_packages, 4 * limits.file_mb, info_write)
            env, cwd, popen_kw, passed_fds = _scrubbed_env(WORKDIR), "/", {}, (write_fd, info_write)
        else:
            prefix, cwd, popen_kw, host_uid = _weaker_mode(root)
            env, passed_fds = _scrubbed_env(cwd), (write_fd,)
        argv = [*prefix, *_python_argv(limits.site_packages), "-c", _BOOTSTRAP, str(write_fd),
                str(limits.memory_mb), str(cpu_s), str(limits.file_mb), str(limits.processes),
                "1" if limits.audit_hook else "0"]
        start = time.perf_counter()
        with open(root / "stdout", "wb") as out, open(root / "stderr", "wb") as err:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, env=env, cwd=cwd,
                                        start_new_session=True, pass_fds=passed_fds, **popen_kw)
            except OSError as e:
                return ExecResult(False, "error", f"could not start: {e}", None, "", "", 0.0, isolation)
            for fd in (write_fd, info_write):
                os.close(fd)
            write_fd = info_write = -1
            _feed(proc, nonce + program.encode("utf-8", errors="surrogateescape"))
            status, hit_backstop = _wait(proc, backstop, host_uid)
            _await_teardown(_sandbox_init_pid(info_read), host_uid)
        wall = time.perf_counter() - start
        proc.returncode = returncode = os.waitstatus_to_exitcode(status)
        stdout, stderr = _read_capped(root / "stdout"), _read_capped(root / "stderr")
        verdict, reason = _classify(returncode, secrets.compare_digest(_drain(read_fd), nonce),
                                    backstop if hit_backstop else None, cpu_s, stderr)
        return ExecResult(verdict == "passed", verdict, reason, returncode, stdout, stderr, wall, isolation)
    finally:
        for fd in (write_fd, info_write, read_fd, info_read):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(root, ignore_errors=True)


def _weaker_mode(root: Path) -> tuple[list[str], str, dict, int | None]:
    """(command prefix, work dir, Popen options, uid to kill after a timeout) for the opted-in weaker mode: as root
    a fresh unprivileged uid when it can run the interpreter, else uid 0 without capabilities; as a user, the
    harness turns non-dumpable so the program cannot read its environment."""
    work = root / "work"
    work.mkdir()
    if os.geteuid() != 0:
        _hide_own_environ()
        return [], str(work), {}, None
    if _others_can_run_python():
        uid = _new_host_uid()
        os.chown(work, uid, uid)
        os.chmod(root, 0o711)
        return [], str(work), {"user": uid, "group": uid, "extra_groups": []}, uid
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"] if setpriv else []
    return prefix, str(work), {}, None


def _sandbox_init_pid(info_fd: int) -> int | None:
    """The host pid of the sandbox's init (PID 1 of its namespace), from bwrap's --info-fd JSON."""
    import json

    os.set_blocking(info_fd, False)
    try:
        return int(json.loads(os.read(info_fd, 4096).decode())["child-pid"])
    except (OSError, ValueError, KeyError):
        return None


def _await_teardown(init_pid: int | None, host_uid: int | None, limit_s: float = 10.0) -> None:
    """bwrap exits as soon as its init reports the program's status, while the kernel is still killing the rest
    of the PID namespace; wait until that init is gone (it exits only after every process in the namespace),
    so no daemon outlives `execute`. Past `limit_s`, kill every process of the sample's uid."""
    if init_pid is None:
        return
    deadline = time.perf_counter() + limit_s
    delay = 0.0005
    while time.perf_counter() < deadline:
        try:
            stat_line = Path(f"/proc/{init_pid}/stat").read_bytes()
        except OSError:
            return
        if stat_line.rsplit(b")", 1)[-1].split()[:1] in ([b"Z"], [b"X"]):
            return
        time.sleep(delay)
        delay = min(2 * delay, 0.02)
    _kill_uid(host_uid)


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    try:
        proc.stdin.write(data)
    except (BrokenPipeError, OSError):
        pass  # the sandbox died before reading it; its exit status says why
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _wait(proc: subprocess.Popen, backstop: float, host_uid: int | None) -> tuple[int, bool]:
    """Wait for the process (pidfd, no polling); past the backstop kill the whole sandbox.
    Returns (wait status, backstop hit)."""
    pidfd = os.pidfd_open(proc.pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], backstop)
    finally:
        os.close(pidfd)
    hit = not ready
    if hit:
        _kill_sandbox(proc, host_uid)
    _, status = os.waitpid(proc.pid, 0)
    return status, hit


def _kill_sandbox(proc: subprocess.Popen, host_uid: int | None) -> None:
    """SIGKILL the process group; as root also every process of the sample's own uid (setsid daemons
    included), so nothing outlives `execute` even before the kernel tears the PID namespace down."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _kill_uid(host_uid)


def _kill_uid(host_uid: int | None) -> None:
    """`kill -KILL -1` as the sample's own host uid: every process of that uid, wherever it hides."""
    if host_uid is not None and shutil.which("kill"):
        subprocess.run([shutil.which("kill"), "-KILL", "-1"], user=host_uid, group=host_uid, extra_groups=[],
                       env={"PATH": "/usr/bin:/bin"}, cwd="/", stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _drain(fd: int, cap: int = 256) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, cap)
    except BlockingIOError:
        return b""


def execute_many(programs: list[str], timeout_s: float = 10.0, workers: int | None = None,
                 limits: Limits | None = None, *, allow_unisolated: bool = False,
                 wall_timeout_s: float | None = None) -> list[ExecResult]:
    """`execute` over many programs with `workers` concurrent processes; results in input order."""
    workers = workers or max(1, (os.cpu_count() or 1))
    if workers < 1:
        raise ValueError(f"workers={workers!r}: expected an int >= 1")
    require_isolation(allow_unisolated)  # refuse once, before any program starts
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda p: execute(p, timeout_s, limits, allow_unisolated=allow_unisolated,
                                               wall_timeout_s=wall_timeout_s), programs))
