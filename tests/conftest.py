"""Shared fixtures: random-weight tiny checkpoints in the real LLaDA and Dream formats; the ``golden`` marker on
every test that reads a golden of tests/fixtures/recorded_on.json."""

from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

# idle OpenMP threads sleep rather than spin (as `make test` sets it): with test workers beside each other, spinning
# threads cost a 2-core box a 13x slowdown; how threads wait changes no result
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from dllm_bench.models.tiny_format import make_random_checkpoint
from tests.machine import golden_names

SUITE_THREADS = 2  # the count the goldens were recorded at (one recorded at another says so: its 'threads'); a CPU product's bits can depend on it
torch.set_num_threads(SUITE_THREADS)
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TESTS = Path(__file__).resolve().parent


def _uses(node: ast.AST) -> set[str]:
    """Module-level names a statement reads: ``NAME`` and, for a helper module ``mod``, ``mod.NAME``."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            names.add(f"{n.value.id}.{n.attr}")
    return names


@cache
def golden_definitions(path: Path) -> frozenset[str]:
    """The module-level functions, classes and assignments of a test module that read a golden: their source names
    one of the manifest's goldens (a fixture's file name, a ``claim:...``), or they read a definition that does,
    here or in a test helper module they import (``from .helper import NAME``, ``import helper as mod``)."""
    source = path.read_text()
    tree = ast.parse(source)
    aliases: dict[str, tuple[Path, str | None]] = {}  # local name -> (helper file, its name; None: the module)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = path.parent.joinpath(*[".."] * (node.level - 1), *(node.module or "").split(".")).resolve()
            for a in node.names:
                helper = base.with_suffix(".py") if node.module else base / f"{a.name}.py"
                aliases[a.asname or a.name] = (helper, a.name) if node.module else (helper, None)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
            for a in node.names:
                aliases[a.asname or a.name] = (TESTS.parent.joinpath(*node.module.split(".")).with_suffix(".py"), a.name)
    defs = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    defs[t.id] = node
    names = golden_names()

    def imported_golden(used: str) -> bool:
        head, _, attr = used.partition(".")
        if head not in aliases:
            return False
        helper, name = aliases[head]
        name = name if name is not None else attr
        return helper.is_file() and helper != path and bool(name) and name in golden_definitions(helper)

    lines = source.splitlines()  # ast.get_source_segment splits the whole file on every call: 100 s a collection

    def text(node: ast.AST) -> str:
        return "\n".join(lines[node.lineno - 1:node.end_lineno])

    golden = {k for k, node in defs.items() if any(n in text(node) for n in names)}
    while True:
        more = {k for k, node in defs.items() if k not in golden
                and any(u in golden or imported_golden(u) for u in _uses(node))}
        if not more:
            return frozenset(golden)
        golden |= more


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``golden``: a test that reads a golden of tests/fixtures/recorded_on.json, directly or through the module's
    helpers (so that a new golden's tests join the lane by naming it); ``make test-cpu-capabilities`` runs them
    under every kernel width. ``xdist_group``: a test file's tests run on one worker of ``make test``'s
    ``-n N --dist loadgroup`` (its module fixtures are built once), unless a test names its own group."""
    for item in items:
        if not any(m.name == "xdist_group" for m in item.iter_markers()):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        function, module = getattr(item, "function", None), getattr(item, "module", None)
        if function is None or module is None or not getattr(module, "__file__", None):
            continue
        owner = item.cls.__name__ if getattr(item, "cls", None) else function.__name__
        if owner in golden_definitions(Path(module.__file__).resolve()):
            item.add_marker(pytest.mark.golden)


@pytest.fixture(autouse=True)
def _suite_threads(request):
    """Each test starts at the suite's thread count, or at its ``threads(n)`` mark's (a golden recorded at n
    threads, its fixture's ``threads``): an in-process run picks its own (runner/threads.py) and would otherwise
    leave it to the tests after it."""
    mark = request.node.get_closest_marker("threads")
    threads = mark.args[0] if mark else SUITE_THREADS
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def load_script() -> Callable[[str], ModuleType]:
    """Import `scripts/<name>.py` as a module (scripts/ is not a package)."""

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"script_{name}", SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def tiny_llada_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LLaDA-format checkpoint (OLMo tensor names, LLaDA chat template), 2 layers, d_model 64."""
    return make_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_llada", "llada", seed=0)


@pytest.fixture(scope="session")
def tiny_dream_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dream-format checkpoint (Qwen2 tensor names, GQA 4/2 heads, q/k/v biases), 2 layers, d_model 64."""
    return make_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_dream", "dream", seed=1)
