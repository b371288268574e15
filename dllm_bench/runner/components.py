"""Bind a run config to the engine: its `policy`, `rule` and `cache` groups to the builders, key for key, and
the whole run to one `DecodeSpec`.

The groups' keys are the builders' parameter names (`builder_parameters`), so a group minus its `name` is
passed through unchanged; the builders and `DecodeSpec` (through `check_combination`) hold every range and
pairing rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dllm_bench.decoding import (
    Accounting,
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    build_selector,
)
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
    return policy, selector, cache


def build_spec(c: dict[str, Any], *, forbidden_token_ids: Sequence[int] = (), tokenizer: Any = None) -> DecodeSpec:
    """The run's decode spec from its config; ValueError names a bad value or combination before any weights load.

    ``forbidden_token_ids`` and ``tokenizer`` come from the loaded model (none while validating); the row seeds
    and stop strings of each batch are set by ``DecodeSpec.for_batch``.
    """
    decoding = Decoding(c["gen_length"], c["block_length"], *build_components(c),
                        early_stop=bool(c.get("early_stop", False)))
    sampling = Sampling(confidence_precision=c.get("confidence_precision", "float64"),
                        confidence_mask_in_softmax=bool(c.get("confidence_mask_in_softmax", True)),
                        temperature=float(c.get("temperature", 0.0)), cfg_scale=float(c.get("cfg_scale", 0.0)),
                        forbidden_token_ids=forbidden_token_ids, seed=int(c.get("seed", 0)))
    return DecodeSpec(decoding, sampling, Accounting(trace=bool(c.get("trace", False)), tokenizer=tokenizer))
