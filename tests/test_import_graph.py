"""The package's import graph has no cycles and follows the layers: models <- decoding <- tasks <- runner, report."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the inner loop: make test-fast

PACKAGE = Path(__file__).resolve().parents[1] / "dllm_bench"
# A module may import its own layer or lower ones only (top-level modules are the apps: run, lm-eval plugin).
LAYERS = {"models": 0, "decoding": 1, "tasks": 2, "tiny": 3, "runner": 4, "tracking": 4, "report": 5}
APP = 6


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """dllm_bench modules this file imports anywhere (module level or inside functions)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def layer(name: str) -> int:
    parts = name.split(".")
    return LAYERS.get(parts[1], APP) if len(parts) > 1 else APP


def test_no_import_cycles():
    edges = graph()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert cycles == []


def test_imports_respect_the_layers():
    wrong = [f"{a} -> {b}" for a, targets in graph().items() for b in targets
             if layer(b) > layer(a) and layer(a) != APP]
    assert wrong == []


def test_the_graph_sees_lazy_imports():
    edges = graph()
    assert "dllm_bench.runner.engine" in edges["dllm_bench.runner.execute"]  # imported inside a function
    assert "dllm_bench.models.llada_v" in edges["dllm_bench.models.loading"]
    assert "dllm_bench.tasks.sudoku_puzzles" in edges["dllm_bench.tiny.encoding"]
