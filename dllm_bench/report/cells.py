"""What each table cell runs, in words: the composed config's policy, rule, cache, counting and scoring per cell.

`docs/reports.md` embeds this listing for every paper table (`scripts/reproduce_table.py --cells` prints it);
a test checks the two agree, so the docs always say what the data in dllm_bench/report/table_specs/ makes the runner do.
"""

from __future__ import annotations

from typing import Any

from dllm_bench.report.runs import compose_configs
from dllm_bench.report.tables import TABLES, TableSpec, table_cells

BEGIN, END = "<!-- cells:begin (generated: scripts/reproduce_table.py --cells) -->", "<!-- cells:end -->"


def _value(v: Any) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def group_text(group: dict[str, Any]) -> str:
    """`name(key=value, ...)` of a decoding group, keys in file order."""
    params = ", ".join(f"{k}={_value(v)}" for k, v in group.items() if k != "name")
    return f"{group['name']}({params})" if params else str(group["name"])


def semantics(config: dict[str, Any], scoring: str | None) -> dict[str, str]:
    """The settings a cell's semantics are pinned by, as text."""
    return {"policy": group_text(config["policy"]), "rule": group_text(config["rule"]),
            "cache": group_text(config["cache"]), "lengths": f"{config['gen_length']}/{config['block_length']}",
            "count_rule": str(config["count_rule"]), "scoring": scoring or "—",
            "confidence": str(config.get("confidence_precision", "float64"))}


def cell_listing(spec: TableSpec) -> str:
    """A Markdown table: one line per cell with what it runs (or why it cannot run)."""
    cells = table_cells(spec)
    runnable = [c for c in cells if c.unavailable is None]
    configs = dict(zip(map(id, runnable), compose_configs([(spec.preset, c.overrides) for c in runnable])))
    lines = [f"#### {spec.name}: {spec.title}", "",
             "| row | column | policy | rule | cache | gen/block | count | scoring | confidence |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        head = f"| {c.row[0]} | {c.col[0]} |"
        if c.unavailable is not None:
            lines.append(f"{head} n/a: {c.unavailable} | | | | | | |")
            continue
        s = semantics(configs[id(c)], c.scoring)
        lines.append(f"{head} `{s['policy']}` | `{s['rule']}` | `{s['cache']}` | {s['lengths']} | {s['count_rule']} "
                     f"| {s['scoring']} | {s['confidence']} |")
    return "\n".join(lines) + "\n"


def all_listings() -> str:
    """Every paper table's listing, between the markers docs/reports.md holds them in."""
    body = "\n".join(cell_listing(spec) for spec in TABLES.values() if spec.paper)
    return f"{BEGIN}\n\n{body}\n{END}"
