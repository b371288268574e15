"""Hostile programs against the sandbox, each aimed only at 127.0.0.1 and throwaway dirs, each with its outcome checked
on the host: with the audit hook on, and switched off (both from inside and by `Limits(audit_hook=False)`)."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dllm_bench.tasks import sandbox
from dllm_bench.tasks.sandbox import ExecResult, Limits, execute_many

HOOK_OFF = "import sys\nsys.modules['__main__']._blocked = ()\n"  # the line that switched the old hook off
SECRET = "hf_" + "s3cr3t" * 4
VISIBLE_HOST_DIRS = [sys.base_prefix, sys.base_prefix + "/lib", "/usr/lib", "/usr/bin"]  # bound read-only


@dataclass
class Host:
    """What a hostile program aims at: files to spare, a dir to stay out of, a listener, a parent secret."""

    victim: Path
    outside: Path
    secret_file: Path
    port: int
    hits: list
    mark: str

    def leftovers(self) -> list[str]:
        """Host processes whose command line carries this run's mark (daemons, spinners, bomb children)."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if self.mark.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
        return found


Check = Callable[[Host, ExecResult], bool]


def _spared(h: Host, r: ExecResult) -> bool:
    return h.victim.read_text() == "keep me" and not any(h.outside.iterdir())


def _silent(needle: Callable[[Host], str]) -> Check:
    return lambda h, r: needle(h) not in r.stdout + r.stderr and _spared(h, r)


def _gone(h: Host, r: ExecResult) -> bool:
    return not r.passed and h.leftovers() == [] and _spared(h, r)


def _sleeper(h: Host) -> str:
    return f"['sleep', '{h.mark}']"


# name -> (program template, the check that says the host stayed safe). Templates see the Host's fields.
HOSTILE: dict[str, tuple[str, Check]] = {
    "uid_not_root_no_caps": (
        "import os\nassert os.getuid() != 0 and os.geteuid() != 0 and os.getgid() != 0\n"
        "st = open('/proc/self/status').read()\n"
        "for key in ('CapEff', 'CapPrm', 'CapAmb'):\n    assert int(st.split(key + ':')[1].split()[0], 16) == 0, key\n",
        lambda h, r: r.passed,
    ),
    "read_root_only_file": ("print(open({secret_file!r}).read())\n", _silent(lambda h: SECRET)),
    "read_etc_shadow": ("print(open('/etc/shadow').read())\n", _silent(lambda h: "root:")),
    "write_open": ("open({outside!r} + '/by_open', 'w').write('x')\n", _spared),
    "write_dir_fd": ("import os\nd = os.open({outside!r}, os.O_RDONLY)\n"
                     "os.write(os.open('by_dir_fd', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=d), b'x')\n", _spared),
    "mkdir": ("import os\nos.mkdir({outside!r} + '/by_mkdir')\n", _spared),
    "write_into_visible_host_dirs": (
        "import os, sys\nfor d in [sys.base_prefix, sys.base_prefix + '/lib', '/usr/lib', '/usr/bin']:\n"
        "    for attempt in (lambda: open(d + '/by_open_{mark}', 'w'), lambda: os.mkdir(d + '/by_mkdir_{mark}'),\n"
        "                    lambda: os.open('by_dir_fd_{mark}', os.O_CREAT | os.O_WRONLY, dir_fd=os.open(d, 0))):\n"
        "        try:\n            attempt()\n        except OSError:\n            pass\n",
        lambda h, r: not any(Path(d, f"{kind}_{h.mark}").exists() for d in VISIBLE_HOST_DIRS
                             for kind in ("by_open", "by_mkdir", "by_dir_fd")) and _spared(h, r),
    ),
    "rename": ("import os\nos.rename({victim!r}, {outside!r} + '/by_rename')\n", _spared),
    "symlink": ("import os\nos.symlink({outside!r} + '/by_link_target', 'l')\nopen('l', 'w').write('x')\n"
                "os.symlink({victim!r}, {outside!r} + '/by_symlink')\n", _spared),
    "hardlink": ("import os\nos.link({victim!r}, 'h')\nopen('h', 'w').write('gone')\n"
                 "os.link({victim!r}, {outside!r} + '/by_hardlink')\n", _spared),
    "shell_and_subprocess": ("import os, subprocess\n"
                             "os.system('echo gone > {victim}; touch {outside}/by_system')\n"
                             "subprocess.run(['sh', '-c', 'echo gone > {victim}; touch {outside}/by_subprocess'])\n",
                             _spared),
    "parent_environment": (
        "import os\nseen = [os.environ.get(k, '') for k in os.environ]\n"
        "for p in ['self', str(os.getppid()), *filter(str.isdigit, os.listdir('/proc'))]:\n"
        "    try:\n        seen.append(open(f'/proc/{{p}}/environ', 'rb').read().decode(errors='replace'))\n"
        "    except OSError:\n        pass\nprint(seen)\n",
        _silent(lambda h: SECRET),
    ),
    "forge_pass_from_file_argv_fds": (
        "import os, re, sys\ntexts = []\n"
        "for path in [sys.argv[0], __file__ if '__file__' in dir() else '', '/proc/self/cmdline', '/proc/self/environ']:\n"
        "    try:\n        texts.append(open(path, 'rb').read())\n    except OSError:\n        pass\n"
        "for fd in range(256):\n    try:\n        os.set_blocking(fd, False)\n        texts.append(os.read(fd, 1 << 16))\n"
        "    except OSError:\n        pass\n"
        "tokens = set(re.findall(rb'[0-9a-f]{{32}}', b' '.join(texts)))\n"
        "fds = sorted({{int(m) for t in texts for m in re.findall(rb'write\\((\\d+)', t)}}) or range(3, 64)\n"
        "for fd in fds:\n    for token in tokens:\n        try:\n            os.write(fd, token)\n"
        "        except OSError:\n            pass\nos._exit(0)\n",
        lambda h, r: not r.passed,
    ),
    "new_user_namespace": (  # a namespace of its own would hand the program capabilities (over it) again
        "import ctypes\nif ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0:\n    print('USERNS_CREATED')\n",
        lambda h, r: "USERNS_CREATED" not in r.stdout or not sandbox._optional_flags(shutil.which("bwrap") or ""),
    ),
    "network_to_host": ("import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                        "s.sendall(b'hi')\n", lambda h, r: h.hits == []),
    "signal_the_harness": (f"import os\nos.kill({os.getpid()}, 0)\nprint('REACHED')\n",
                           lambda h, r: "REACHED" not in r.stdout),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()\n", lambda h, r: not r.passed),
    "fork_bomb_of_sleepers": (
        "import os\nwhile True:\n    if os.fork() == 0:\n        os.setsid()\n        os.execv('/bin/sleep', {sleeper})\n",
        _gone,
    ),
    "memory_bomb": ("x = bytearray(64 * 1024 ** 3)\n", lambda h, r: not r.passed),
    "memory_growth": ("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 ** 2))\n",
                      lambda h, r: not r.passed),
    "output_flood": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
                     lambda h, r: not r.passed and len(r.stdout) < 20_000),
    "signal_ignoring_spinner": (
        "import os, signal\nif os.fork() == 0:\n"
        "    os.execv('/bin/sh', ['sh', '-c', 'trap \"\" TERM INT HUP XCPU; while :; do :; done', '{mark}'])\n"
        "for s in (signal.SIGXCPU, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\n"
        "while True:\n    pass\n",
        _gone,
    ),
    "setsid_double_fork_daemon": (
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv('/bin/sleep', {sleeper})\n    os._exit(0)\nos.wait()\nassert False, 'daemon started'\n",
        _gone,
    ),
}


@pytest.fixture
def host(tmp_path, monkeypatch, loopback):
    """A victim file, an empty outside dir, a root-only secret file, a 127.0.0.1 listener, a secret in our env."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(outside, 0o777)  # writable by anyone: only the sandbox can keep a program out
    secret_file = tmp_path / "root_only.txt"
    secret_file.write_text(SECRET)
    os.chmod(secret_file, 0o600)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    with loopback(8) as (port, hits):
        yield Host(victim, outside, secret_file, port, hits, f"987654.{secrets.randbelow(10**9)}")


def render(template: str, h: Host, hook_off: bool) -> str:
    fields = {"victim": str(h.victim), "outside": str(h.outside), "secret_file": str(h.secret_file),
              "port": h.port, "mark": h.mark, "sleeper": _sleeper(h)}
    return (HOOK_OFF if hook_off else "") + template.format(**fields)


@pytest.mark.slow
@pytest.mark.parametrize("hook", ["audit_hook_on", "audit_hook_off"])
def test_hostile_programs_leave_the_host_untouched(host, hook):
    if sandbox.isolation_unavailable_reason() is not None:
        pytest.fail(f"OS isolation must work on this machine: {sandbox.isolation_unavailable_reason()}")
    off = hook == "audit_hook_off"
    names = list(HOSTILE)
    programs = [render(HOSTILE[n][0], host, off) for n in names]
    results = execute_many(programs, timeout_s=2, workers=4, limits=Limits(audit_hook=not off), wall_timeout_s=8)
    unsafe = [(n, r.status, r.reason, r.stdout[:200]) for n, r in zip(names, results)
              if not HOSTILE[n][1](host, r)]
    assert unsafe == []
    assert all(r.isolation == "bwrap" for r in results)


def test_a_refusal_names_the_reason_and_the_opt_in_key(monkeypatch):
    monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "bwrap failed: simulated")
    with pytest.raises(sandbox.SandboxUnavailable) as err:
        sandbox.execute("assert True\n", timeout_s=2)
    message = str(err.value)
    assert "\n" not in message and "simulated" in message and sandbox.OPT_IN in message
    with pytest.raises(sandbox.SandboxUnavailable):
        execute_many(["assert True\n"], timeout_s=2)
    result = sandbox.execute("assert True\n", timeout_s=2, allow_unisolated=True)
    assert result.passed and result.isolation == "rlimits+audit"


def test_the_weaker_mode_still_scrubs_and_hides_environments(host, monkeypatch):
    monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "simulated")
    program = render(HOSTILE["parent_environment"][0], host, hook_off=True)
    (result,) = execute_many([program], timeout_s=5, limits=Limits(audit_hook=False), allow_unisolated=True)
    assert result.isolation == "rlimits+audit" and result.status == "passed"
    assert SECRET not in result.stdout


def test_cpu_time_limit_stops_a_spinner_and_the_wall_backstop_a_sleeper():
    # the spinner's backstop is far away (a loaded machine may give it 1 s of CPU slowly); the sleeper's is near
    (spinner,) = execute_many(["while True:\n    pass\n"], timeout_s=1, wall_timeout_s=300)
    (sleeper,) = execute_many(["import time\ntime.sleep(600)\n"], timeout_s=1, wall_timeout_s=4)
    assert (spinner.status, spinner.reason) == ("timeout", "CPU-time limit of 1 s reached")
    assert spinner.returncode == 128 + 24  # SIGXCPU, reported by bwrap as 128 + signal
    assert sleeper.status == "timeout" and "wall-clock backstop of 4 s" in sleeper.reason


def test_a_busy_wall_clock_does_not_fail_a_program_within_its_cpu_budget():
    # sleeping costs no CPU: 3 s asleep under a 1 s CPU limit passes (a wall-clock limit of 1 s would fail it)
    (result,) = execute_many(["import time\ntime.sleep(3)\n"], timeout_s=1, wall_timeout_s=30)
    assert result.passed, result
