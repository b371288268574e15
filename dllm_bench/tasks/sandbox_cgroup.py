"""A cgroup per sandboxed sample: memory and process count summed over all its processes, its CPU time read
as one figure, and one kill for all of them (docs/sandbox.md, "Per-sample totals").

Works with cgroup v2, v1 and the hybrid of both: each need (memory, pids, CPU usage, kill) is met by the first
writable hierarchy that has it. Sample cgroups are made under the harness's own cgroup (so its limits still
bound them), named `dllm-sandbox-<harness pid>-<random>`; those of a harness that died are removed on the next
start. Where nothing is writable (a plain user, a read-only /sys/fs/cgroup) `SampleCgroup.create` returns None
and the sandbox falls back to per-process rlimits.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PREFIX = "dllm-sandbox-"
NEEDS = ("memory", "pids", "cpu", "kill", "quota")  # cpu: usage read as one figure; quota: CPU bandwidth cap
PERIOD_US = 100_000  # the CPU bandwidth period; a sample of `cpus` CPUs gets cpus x this per period


@dataclass(frozen=True)
class Hierarchy:
    """One mounted cgroup hierarchy: where sample cgroups go, and which needs it meets there."""

    parent: Path
    version: int
    provides: frozenset[str]


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount point, root inside the hierarchy, fs type, super options) of every cgroup mount."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            out.append((fields[4].replace("\\040", " "), fields[3], tail[0], tail[2]))
    return out


def _own_paths() -> tuple[dict[str, str], str | None]:
    """This process's cgroup path per v1 controller, and its v2 path (None without a v2 line)."""
    v1, v2 = {}, None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            v2 = path
        for c in controllers.split(","):
            v1[c] = path
    return v1, v2


def _inside(mount: str, root: str, path: str) -> Path | None:
    """The directory of cgroup `path` under a mount of hierarchy subtree `root`, if it is visible there."""
    if root != "/" and not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None
    rel = path[len(root):] if root != "/" else path
    return Path(mount, rel.lstrip("/"))


def _v2_provides(parent: Path) -> frozenset[str]:
    """What a child of `parent` gets on cgroup v2: cpu.stat and one kill always (cgroup.kill from Linux 5.14,
    else each member), memory, pids and a CPU quota (cpu.max) where they can be enabled for children."""
    provides = {"cpu", "kill"}
    try:
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        wanted = {"memory", "pids", "cpu"} & set((parent / "cgroup.controllers").read_text().split()) - enabled
        if wanted:  # fails (EBUSY) where the parent holds processes and is not the root: then rlimits only
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(wanted)))
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
    except OSError:
        enabled = set()
    return frozenset(provides | ({"memory", "pids"} & enabled) | ({"quota"} if "cpu" in enabled else set()))


@lru_cache(maxsize=1)
def hierarchies() -> tuple[Hierarchy, ...]:
    """The writable hierarchies that meet the needs, first one first per need; empty when none is writable."""
    try:
        mounts, (v1_paths, v2_path) = _mounts(), _own_paths()
    except (OSError, ValueError):
        return ()
    found: list[Hierarchy] = []
    for mount, root, fstype, options in mounts:
        if fstype == "cgroup2":
            parent = _inside(mount, root, v2_path) if v2_path is not None else None
            provides = _v2_provides(parent) if parent is not None and os.access(parent, os.W_OK) else frozenset()
        else:
            controllers = set(options.split(",")) & {"memory", "pids", "cpuacct", "cpu"}
            path = next((v1_paths[c] for c in controllers if c in v1_paths), None)
            parent = _inside(mount, root, path) if path is not None else None
            provides = frozenset({"memory": "memory", "pids": "pids", "cpuacct": "cpu", "cpu": "quota"}[c]
                                 for c in controllers)
            if parent is None or not os.access(parent, os.W_OK):
                provides = frozenset()
        if parent is not None and provides:
            found.append(Hierarchy(parent, 2 if fstype == "cgroup2" else 1, provides))
    found.sort(key=lambda h: -h.version)  # v2 first: one kill file, cpu.stat in microseconds
    chosen, met = [], set()
    for h in found:
        if h.provides - met:
            chosen.append(h)
            met |= h.provides
    return tuple(chosen)


def capabilities() -> frozenset[str]:
    """Which of NEEDS a per-sample cgroup meets on this machine ("memory", "pids", "cpu", "kill", "quota")."""
    return frozenset(n for h in hierarchies() for n in h.provides)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0; a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep() -> None:
    """Kill and remove what a harness that died by a signal left in its sample cgroups: bwrap's child can be
    stuck waiting for a launcher that died in the few instructions before releasing it (no parent-death
    signal is set by then), and nothing else ends it."""
    stale: dict[str, list[tuple[Hierarchy, Path]]] = {}
    for h in hierarchies():
        try:
            entries = list(h.parent.iterdir())
        except OSError:
            continue
        for entry in entries:
            pid = entry.name[len(PREFIX):].split("-", 1)[0] if entry.name.startswith(PREFIX) else ""
            if pid.isdigit() and not pid_alive(int(pid)):
                stale.setdefault(entry.name, []).append((h, entry))
    for dirs in stale.values():
        SampleCgroup(dirs).remove(limit_s=1.0)


@lru_cache(maxsize=1)
def _swept() -> bool:
    _sweep()
    return True


# Runs as `python -I -S -c WATCHDOG <harness pid> <temp dir glob> <cgroup parent>...` beside the harness: it
# waits for EOF on stdin (the harness's end of the pipe closes however the harness ends, SIGKILL included),
# then kills every process in that harness's sample cgroups and removes them and its temp dirs.
WATCHDOG = r"""
import glob, os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdin.buffer.read()
pid, temps, parents = sys.argv[1], sys.argv[2], sys.argv[3:]
dirs = [d for p in parents for d in glob.glob(os.path.join(p, "PREFIX" + pid + "-*"))]
deadline = time.monotonic() + 5
while dirs and time.monotonic() < deadline:
    busy = []
    for d in dirs:
        try:
            members = open(os.path.join(d, "cgroup.procs")).read().split()
        except OSError:
            continue
        if members:
            busy.append(d)
            try:
                open(os.path.join(d, "cgroup.kill"), "w").write("1")
            except OSError:
                for m in members:
                    try:
                        os.kill(int(m), signal.SIGKILL)
                    except OSError:
                        pass
        else:
            try:
                os.rmdir(d)
            except OSError:
                busy.append(d)
    dirs = busy
    time.sleep(0.01)
for t in glob.glob(temps):
    shutil.rmtree(t, ignore_errors=True)
""".replace("PREFIX", PREFIX)


_WATCHDOG_LOCK = threading.Lock()
_watchdogs: dict[int, subprocess.Popen | None] = {}  # harness pid -> its watchdog (kept: its pipe is the signal)


def start_watchdog(temp_glob: str) -> subprocess.Popen | None:
    """Once per harness, where there are cgroups: the process that cleans up after it if it dies by a signal.
    Started under a lock: a second one whose pipe end got dropped would sweep the live harness's samples."""
    with _WATCHDOG_LOCK:
        if os.getpid() not in _watchdogs:
            _watchdogs[os.getpid()] = _spawn_watchdog(temp_glob)
        return _watchdogs[os.getpid()]


def _spawn_watchdog(temp_glob: str) -> subprocess.Popen | None:
    parents = [str(h.parent) for h in hierarchies()]
    if not parents:
        return None
    try:
        return subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHDOG, str(os.getpid()), temp_glob, *parents],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, env={"PATH": "/usr/bin:/bin"})
    except OSError:
        return None


class SampleCgroup:
    """The cgroup(s) of one sample; `join_argv` puts a command into them before it execs."""

    def __init__(self, dirs: list[tuple[Hierarchy, Path]]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, memory_bytes: int, pids: int, cpus: int | None = None) -> SampleCgroup | None:
        """Make the sample's cgroup in every hierarchy needed, with its memory and process limits and (`cpus`)
        its CPU bandwidth; None when no hierarchy is writable."""
        if not hierarchies():
            return None
        _swept()
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        made: list[tuple[Hierarchy, Path]] = []
        try:
            for h in hierarchies():
                path = h.parent / name
                path.mkdir()
                made.append((h, path))
                if "memory" in h.provides:
                    _set_memory(path, h.version, memory_bytes)
                if "pids" in h.provides:
                    (path / "pids.max").write_text(str(pids))
                if "quota" in h.provides and cpus is not None:
                    _set_quota(path, h.version, cpus)
        except OSError:
            cls(made).remove()
            return None
        return cls(made)

    def provides(self, need: str) -> bool:
        return any(need in h.provides for h, _ in self.dirs)

    def join_argv(self, argv: list[str], sh: str = "/bin/sh", joined_fd: int | None = None) -> list[str]:
        """`argv` behind a shell that first writes its own pid into each of this sample's cgroup.procs, then
        (`joined_fd`) writes b"j" to that inherited pipe: the harness's evidence that the join succeeded."""
        script = ('m=$1; n=$2; shift 2; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; '
                  '[ "$m" = - ] || printf j > "/proc/self/fd/$m"; exec "$@"')
        procs = [str(path / "cgroup.procs") for _, path in self.dirs]
        return [sh, "-c", script, "sh", "-" if joined_fd is None else str(joined_fd), str(len(procs)), *procs, *argv]

    def cpu_seconds(self) -> float | None:
        """CPU time used by every process the sample ever had (exited ones included)."""
        for h, path in self.dirs:
            if "cpu" not in h.provides:
                continue
            try:
                if h.version == 2:
                    for line in (path / "cpu.stat").read_text().splitlines():
                        if line.startswith("usage_usec "):
                            return int(line.split()[1]) / 1e6
                else:
                    return int((path / "cpuacct.usage").read_text()) / 1e9
            except (OSError, ValueError):
                return None
        return None

    def memory_exhausted(self) -> bool:
        """Did the kernel OOM-kill a process of the sample (its memory total reached)?"""
        for h, path in self.dirs:
            if "memory" not in h.provides:
                continue
            name = "memory.events" if h.version == 2 else "memory.oom_control"
            try:
                for line in (path / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
            except (OSError, ValueError):
                return False
        return False

    def members(self) -> set[int]:
        pids: set[int] = set()
        for _, path in self.dirs:
            try:
                pids.update(int(p) for p in (path / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                continue
        return pids

    def kill(self) -> None:
        """SIGKILL every process of the sample: cgroup.kill where the kernel has it, else each member."""
        for h, path in self.dirs:
            if h.version == 2 and "kill" in h.provides:
                try:
                    (path / "cgroup.kill").write_text("1")
                    return
                except OSError:
                    break
        for pid in self.members():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def remove(self, limit_s: float = 5.0) -> bool:
        """Kill what is left, wait until the cgroups are empty, remove them; False if one stayed populated."""
        deadline = time.monotonic() + limit_s
        delay = 0.0005
        while True:
            if not self.members():
                break
            self.kill()
            if time.monotonic() > deadline:
                return False
            time.sleep(delay)
            delay = min(2 * delay, 0.02)
        ok = True
        for _, path in reversed(self.dirs):
            for _ in range(50):  # rmdir can briefly fail (EBUSY) while the last exit is being accounted
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.002)
            else:
                ok = False
        self.dirs = []
        return ok


def _set_quota(path: Path, version: int, cpus: int) -> None:
    """At most `cpus` CPUs for the sample's processes together (cgroup v2 cpu.max, v1 cfs quota/period)."""
    if version == 2:
        (path / "cpu.max").write_text(f"{cpus * PERIOD_US} {PERIOD_US}")
        return
    (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (path / "cpu.cfs_quota_us").write_text(str(cpus * PERIOD_US))


def _set_memory(path: Path, version: int, memory_bytes: int) -> None:
    """The memory limit, swap included (no swap beyond it)."""
    if version == 2:
        (path / "memory.max").write_text(str(memory_bytes))
        if (path / "memory.swap.max").exists():
            (path / "memory.swap.max").write_text("0")
        return
    (path / "memory.limit_in_bytes").write_text(str(memory_bytes))
    if (path / "memory.memsw.limit_in_bytes").exists():
        try:
            (path / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
        except OSError:  # swap accounting off
            pass
