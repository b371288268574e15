"""Code answers as the papers scored them: Fast-dLLM's HumanEval postprocess and lm-eval's raw MBPP pass@1.

HumanEval (Fast-dLLM / Fast-dLLM++ / SlowFast scripts): take the text after the first "```python\\n" (the
whole answer when there is none) up to the next "```", append it to the prompt, then keep the imports and
the definitions reachable from the entry point in the longest parsable stretch of the first 100 lines
(functions only if they contain a `return`), re-printed by `ast.unparse`. So an untagged fence yields the
text before it, and the prompt's imports and helpers are always there.
"""

from __future__ import annotations

import ast

PYTHON_FENCE = "```python\n"
MAX_LINES = 100


def paper_fence_text(completion: str) -> str:
    """The text after the first "```python\\n" (or all of it) up to the next "```"."""
    start = completion.find(PYTHON_FENCE)
    body = completion if start < 0 else completion[start + len(PYTHON_FENCE) :]
    end = body.find("```")
    return body if end < 0 else body[:end]


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, MemoryError, ValueError):
        return False
    return True


def longest_parsable(text: str) -> str:
    """The contiguous run of lines (first 100) that parses and has the most non-blank lines; earliest wins ties."""
    lines = text.splitlines()[:MAX_LINES]
    nonblank = [1 if line.strip() else 0 for line in lines]
    remaining = [sum(nonblank[i:]) for i in range(len(lines))]
    best, best_code = 0, ""
    for i in range(len(lines)):
        if remaining[i] <= best:
            break  # no run starting here can beat the best one
        count = remaining[i]
        for j in range(len(lines), i, -1):  # the longest parsable run from i has the most non-blank lines
            if count > best and _parses("\n".join(lines[i:j])):
                best, best_code = count, "\n".join(lines[i:j])
                break
            count -= nonblank[j - 1]
            if count <= best:
                break
    return best_code


def _referenced_names(node: ast.AST) -> set[str]:
    """Names a definition refers to: every `Name`, and the attribute name (only) of every `Attribute`."""
    names, stack = set(), [node]
    while stack:
        for child in ast.iter_child_nodes(stack.pop()):
            if isinstance(child, ast.Name):
                names.add(child.id)
            elif isinstance(child, ast.Attribute):
                names.add(child.attr)
            else:
                stack.append(child)
    return names


def _definition_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.ClassDef):
        return node.name
    if isinstance(node, ast.FunctionDef):
        return node.name if any(isinstance(n, ast.Return) for n in ast.walk(node)) else None
    if isinstance(node, ast.Assign) and node.targets and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def reachable_program(text: str, entry_point: str) -> str:
    """Imports, then the definitions the entry point reaches (a later definition of a name replaces an earlier
    one in its place), each re-printed by `ast.unparse`."""
    text = text.replace("\t", "    ").replace("\r\n", "\n").replace("\r", "\n").strip() + "\n"
    tree = ast.parse(longest_parsable(text))
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    definitions: dict[str, ast.stmt] = {}
    for node in tree.body:
        name = _definition_name(node)
        if name is not None:
            definitions[name] = node
    graph = {name: _referenced_names(node) for name, node in definitions.items()}
    reached, frontier = set(), [entry_point]
    while frontier:
        name = frontier.pop()
        if name not in reached:
            reached.add(name)
            frontier.extend(graph.get(name, set()) - reached)
    kept = imports + [node for name, node in definitions.items() if name in reached]
    return "\n".join(ast.unparse(node) for node in kept)


def paper_humaneval_program(completion: str, prompt: str, entry_point: str) -> str:
    """The program Fast-dLLM's postprocess tests for this answer (before the official tests are appended)."""
    return reachable_program(prompt + "\n" + paper_fence_text(completion), entry_point)
