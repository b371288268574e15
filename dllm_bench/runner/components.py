"""Bind a run config's `policy`, `rule` and `cache` groups to the engine's builders, key for key.

The groups' keys are the builders' parameter names (`builder_parameters`), so a group minus its `name` is
passed through unchanged; the builders and `check_combination` hold every range and pairing rule.
"""

from __future__ import annotations

from typing import Any

from dllm_bench.decoding import build_cache, build_policy, build_selector, check_combination
from dllm_bench.decoding.config import Cache, Policy, Selector

NO_RULE = "none"  # rule=none: the policy commits by its own rule (no selector object)


def _params(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "name"}


def build_components(c: dict[str, Any]) -> tuple[Policy, Selector | None, Cache]:
    """(policy, selector or None, cache) of a config; ValueError names the bad value (docs/decoding.md)."""
    policy = build_policy(c["policy"]["name"], **_params(c["policy"]))
    rule = c["rule"]["name"]
    selector = None if rule == NO_RULE else build_selector(rule, **_params(c["rule"]))
    cache = build_cache(c["cache"]["name"], **_params(c["cache"]))
    check_combination(policy, selector, cache, gen_length=c["gen_length"], block_length=c["block_length"],
                      cfg_scale=float(c.get("cfg_scale", 0.0)))
    return policy, selector, cache
