"""Shared helpers for task tests: fixture paths and lm-eval's own rendering of its tasks, offline."""

from __future__ import annotations

import os
import random
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"
SYSTEM_PYTHON = os.path.realpath("/usr/bin/python3") if os.path.exists("/usr/bin/python3") else ""


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def lm_eval_render(tmp_path_factory):
    """render(yaml relative to lm_eval/tasks, {split: file}, limit, **overrides) -> lm-eval's prompt strings."""
    cache = tmp_path_factory.mktemp("hf_datasets_cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("HF_DATASETS_OFFLINE", "1")
    patch.setenv("HF_HUB_OFFLINE", "1")
    import lm_eval.tasks
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    root = Path(lm_eval.tasks.__file__).parent

    def render(yaml: str, files: dict[str, str], limit: int, **overrides) -> list[str]:
        cfg = load_yaml(str(root / yaml))
        builder = "csv" if str(next(iter(files.values()))).endswith(".csv") else "json"
        cfg.update(dataset_path=builder, dataset_name=None,
                   dataset_kwargs={"data_files": {k: str(v) for k, v in files.items()}, "cache_dir": str(cache)},
                   **overrides)
        random.seed(0)  # lm_eval.simple_evaluate seeds `random` with 0 before building tasks
        task = ConfigurableTask(config=cfg)
        task.set_fewshot_seed(1234)  # simple_evaluate's default fewshot_random_seed
        task.build_all_requests(limit=limit)
        return [inst.args[0] for inst in task.instances]

    yield render
    patch.undo()


@contextmanager
def loopback_listener(backlog: int = 4) -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 that records what reaches it: (port, received bytes per connection)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(backlog)
    server.settimeout(0.2)
    hits: list[bytes] = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                hits.append(conn.recv(16))
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], hits
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.fixture(scope="session")
def loopback():
    """The `loopback_listener` context manager, for tests in this folder (it is not a package to import from)."""
    return loopback_listener


@pytest.fixture
def use_bwrap_path(monkeypatch):
    """use(name): force one of root's two sandbox paths (docs/sandbox.md, "Why bubblewrap") for this test:
    "two_bwrap" (a view built for an interpreter under a 0700 home) or "one_bwrap" (the system interpreter,
    readable by every user)."""
    from dllm_bench.tasks import sandbox

    def use(name: str) -> None:
        if os.geteuid() != 0:
            pytest.skip("the two bwrap paths are root's; a plain user always takes one bwrap")
        if sandbox.isolation_unavailable_reason() is not None:
            pytest.fail(f"OS isolation must work on this machine: {sandbox.isolation_unavailable_reason()}")
        if name == "two_bwrap":
            if not sandbox._python_roots(False):
                pytest.skip("the interpreter lives under /usr: there is no prefix to build a view for")
            monkeypatch.setattr(sandbox, "_traversable", lambda directory: False)
        else:
            if not (SYSTEM_PYTHON and sandbox._traversable(os.path.dirname(SYSTEM_PYTHON))):
                pytest.skip("no interpreter readable by every user in /usr/bin")
            monkeypatch.setattr(sandbox, "_python_argv",
                                lambda site: [SYSTEM_PYTHON, "-I", *([] if site else ["-S"])])
            monkeypatch.setattr(sandbox, "_python_roots", lambda site: [])
        assert sandbox.two_bwrap_path(sandbox._new_host_uid(), False) == (name == "two_bwrap")

    return use


@pytest.fixture(scope="session")
def system_python() -> str:
    """The system interpreter any user can read ("" if there is none)."""
    return SYSTEM_PYTHON
