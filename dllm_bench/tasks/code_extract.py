"""Pulling Python out of model completions: fenced blocks, stop-string cuts, and AST sanitising."""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def cut_at_stops(text: str, stops: tuple[str, ...] | list[str]) -> str:
    """`text` up to the earliest occurrence of any stop string."""
    cut = len(text)
    for stop in stops:
        pos = text.find(stop)
        if 0 <= pos < cut:
            cut = pos
    return text[:cut]


def fenced_blocks(text: str) -> list[str]:
    """Contents of the ``` fenced blocks in `text`, python/py/untagged ones only; an unclosed last fence counts."""
    return [body for lang, body in _FENCE.findall(text) if lang.lower() in ("", "python", "py", "python3")]


def defines(code: str, name: str) -> bool:
    """Does `code` contain a `def name(` at any indentation?"""
    return re.search(rf"^\s*(async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def parse_prefix(code: str) -> ast.Module | None:
    """Parse `code`, dropping trailing lines until it parses (a generation cut mid-statement); None if nothing does."""
    lines = code.splitlines()
    for end in range(len(lines), 0, -1):
        try:
            return ast.parse("\n".join(lines[:end]))
        except (SyntaxError, ValueError):
            continue
    return None


_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


def sanitize(code: str, entry_point: str | None = None) -> str:
    """Keep only imports, definitions and top-level assignments (drop prints, example calls, tests, main guards).

    Source text of kept statements is copied verbatim. When `entry_point` is given and not defined
    afterwards, the code is returned unchanged so the caller can decide.
    """
    tree = parse_prefix(code)
    if tree is None:
        return code
    lines = code.splitlines()
    kept = []
    for node in tree.body:
        if not isinstance(node, _KEEP):
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        kept.append("\n".join(lines[start - 1 : node.end_lineno]))
    out = "\n".join(kept)
    if entry_point is not None and not defines(out, entry_point):
        return code
    return out


def prompt_context(prompt: str, code: str, entry_point: str) -> str:
    """The prompt's imports and helper definitions that `code` lacks, as source lines to put before it.

    A HumanEval answer that restates the entry point often drops the prompt's `from typing import List`, an
    `import math` the prompt has inside the entry point (HumanEval/115), or a helper the prompt defines
    (e.g. `is_palindrome`); all belong to the problem, not the answer.
    """
    tree = parse_prefix(prompt)
    if tree is None:
        return ""
    lines = prompt.splitlines()
    kept = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            kept.append(ast.unparse(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == entry_point:
                kept += [ast.unparse(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
            elif not (defines(code, node.name) or re.search(rf"^\s*class\s+{re.escape(node.name)}\b", code, re.M)):
                start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                kept.append("\n".join(lines[start - 1 : node.end_lineno]))
    return "".join(block + "\n\n" for block in kept)
