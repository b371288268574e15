"""Bind a run config to the engine: its `policy`, `rule` and `cache` groups to the builders, key for key, and
the whole run to one `DecodeSpec`.

The groups' keys are the builders' parameter names (`builder_parameters`), so a choice's `params` are passed
through unchanged; the builders and `DecodeSpec` (through `check_combination`) hold every range and
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
    build_rule,
)
from dllm_bench.decoding.config import Cache, Policy, Rule
from dllm_bench.runner.run_config import RunConfig

NO_RULE = "none"  # rule=none: the policy commits by its own rule (no rule object)


def build_components(run: RunConfig) -> tuple[Policy, Rule | None, Cache]:
    """(policy, rule or None, cache) of a config; ValueError names the bad value (docs/decoding.md)."""
    policy = build_policy(run.policy.name, **run.policy.params)
    rule = None if run.rule.name == NO_RULE else build_rule(run.rule.name, **run.rule.params)
    cache = build_cache(run.cache.name, **run.cache.params)
    return policy, rule, cache


def build_spec(run: RunConfig, *, forbidden_token_ids: Sequence[int] = (), tokenizer: Any = None) -> DecodeSpec:
    """The run's decode spec from its config; ValueError names a bad value or combination before any weights load.

    ``forbidden_token_ids`` and ``tokenizer`` come from the loaded model (none while validating); the row seeds
    and stop strings of each batch are set by ``DecodeSpec.for_batch``.
    """
    decoding = Decoding(run.gen_length, run.block_length, *build_components(run), early_stop=bool(run.early_stop))
    sampling = Sampling(confidence_precision=run.confidence_precision,
                        confidence_mask_in_softmax=bool(run.confidence_mask_in_softmax),
                        temperature=float(run.temperature), cfg_scale=float(run.cfg_scale),
                        forbidden_token_ids=forbidden_token_ids, seed=int(run.seed))
    return DecodeSpec(decoding, sampling, Accounting(trace=bool(run.trace), tokenizer=tokenizer))
