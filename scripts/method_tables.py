"""The docs' method tables, generated from the registries: each method's row from its own metadata (its class
docstring's first paragraph, its ``paper`` if it declares one, its conf options and their parameters), and the
policy x rule verdicts asked of the methods (``dllm_bench.runner.combinations``).

Each table lives between ``<!-- method-table:KIND -->`` and ``<!-- /method-table:KIND -->`` in the docs
(KIND: rules, caches, policies, tasks, policy-rule). ``make docs`` rewrites them; ``--check`` lists the stale ones.
A method added in its files without regenerating leaves the docs stale, never a test failing.

Usage:  PYTHONPATH=. python scripts/method_tables.py [--check] [FILE ...]   (default: every docs/*.md and README.md)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dllm_bench.decoding import config as decoding_config  # noqa: E402
from dllm_bench.decoding.caches import CACHES  # noqa: E402
from dllm_bench.decoding.rules import RULES  # noqa: E402
from dllm_bench.runner.combinations import Refused, find_setting, option_config, option_name, options  # noqa: E402
from dllm_bench.tasks import TASKS  # noqa: E402

KINDS = ("rules", "caches", "policies", "tasks", "policy-rule")
GROUPS = {"rules": "rule", "caches": "cache", "policies": "policy", "tasks": "task"}
SECTION = re.compile(r"(<!-- method-table:(?P<kind>[\w-]+) -->\n)(?P<body>.*?)(<!-- /method-table:(?P=kind) -->)", re.S)


def policy_class(name: str) -> type:
    """The class of a registered policy (``decoding.config.POLICIES`` names them)."""
    registry = decoding_config.POLICIES
    return registry[name] if isinstance(registry, dict) else decoding_config.POLICY_CLASSES[name]


def registry(kind: str) -> dict[str, type]:
    """Registered name -> class of a kind."""
    if kind == "rules":
        return dict(RULES)
    if kind == "caches":
        return dict(CACHES)
    if kind == "policies":
        return {name: policy_class(name) for name in decoding_config.POLICIES}
    return dict(TASKS)


def summary(cls: type) -> str:
    """The first paragraph of a class's docstring (what it is) on one line, pipes escaped for a table cell."""
    paragraph = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split()).replace("|", "\\|")


def yaml_value(value) -> str:
    """A parameter value as its YAML file spells it."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def option_cells(group: str, name: str) -> str:
    """The conf options selecting a method, each with its parameters at their configured values."""
    cells = []
    for option in options(group):
        if option_name(group, option) != name:
            continue
        params = {k: v for k, v in option_config(group, option).items() if k != "name"}
        shown = ", ".join(f"{k}={yaml_value(v)}" for k, v in params.items()) if group != "task" else ""
        cells.append(f"`{group}={option}`" + (f" ({shown})" if shown else ""))
    return "; ".join(cells) or "(no conf option)"


def render(kind: str) -> str:
    """One kind's table as Markdown (ending in a newline)."""
    if kind == "policy-rule":
        return render_policy_rule()
    methods = sorted(registry(kind).items())
    papers = any(getattr(cls, "paper", "") for _, cls in methods)  # a column only where some method declares one
    lines = ["| name | what it is |" + (" paper |" if papers else "") + " conf options |",
             "|---|---|" + ("---|" if papers else "") + "---|"]
    for name, cls in methods:
        paper = f" {getattr(cls, 'paper', '') or ''} |" if papers else ""
        lines.append(f"| `{name}` | {summary(cls)} |{paper} {option_cells(GROUPS[kind], name)} |")
    return "\n".join(lines) + "\n"


def render_policy_rule() -> str:
    """Per policy option: the rule options it runs with (and the steps or block they need), and each refusal's
    reason, as the methods give it (gen_length 24, block_length 8, no cache)."""
    lines = ["| policy | runs with rule | refused (the methods' reason) |", "|---|---|---|"]
    for policy in options("policy"):
        running, refused = [], {}
        for rule in options("rule"):
            try:
                setting = find_setting(policy, rule)
            except Refused as err:
                reason = str(err).replace(f"'{rule}'", "'<rule>'").replace("|", "\\|")  # one line per reason
                refused.setdefault(reason, []).append(rule)
                continue
            needs = ([f"steps={setting.steps}"] if setting.steps is not None else []) + (
                ["one block"] if setting.block_length == setting.gen_length else [])
            running.append(f"`{rule}`" + (f" ({', '.join(needs)})" if needs else ""))
        reasons = "; ".join(f"{', '.join(f'`{r}`' for r in rules)}: \"{reason}\"" for reason, rules in refused.items())
        lines.append(f"| `{policy}` | {', '.join(running) or '—'} | {reasons or '—'} |")
    return "\n".join(lines) + "\n"


def regenerate(text: str) -> str:
    """``text`` with every marked table rewritten."""
    return SECTION.sub(lambda m: m.group(1) + render(m.group("kind")) + m.group(4), text)


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md and docs/*.md)")
    ap.add_argument("--check", action="store_true", help="list files whose tables are stale; exit 1 if any")
    args = ap.parse_args(argv)
    stale = []
    for path in args.files or doc_files():
        text = path.read_text(encoding="utf-8")
        unknown = {m.group("kind") for m in SECTION.finditer(text)} - set(KINDS)
        if unknown:
            print(f"{path}: unknown table kind(s) {sorted(unknown)}; allowed: {', '.join(KINDS)}", file=sys.stderr)
            return 2
        new = regenerate(text)
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
              f"{'stale' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
