"""Plain-value configuration of rules, policies and caches, with builders that validate early.

The runner builds these from Hydra config: ``build_rule(name, **params)``, ``build_policy(name,
**params)``, ``build_cache(name, **params)`` (the registries of rules, policies and caches, filled in
``decoding/rules/``, ``decoding/policies/`` and ``decoding/caches/``); ``check_combination`` rejects combinations
that cannot run together, each part saying what it accepts.
"""

from __future__ import annotations

from dllm_bench.decoding.caches import CACHES, build_cache, cache_parameters
from dllm_bench.decoding.caches.base import Cache
from dllm_bench.decoding.caches.dllm import DLLMCache
from dllm_bench.decoding.caches.dual import DualCache
from dllm_bench.decoding.caches.none import NoCache
from dllm_bench.decoding.caches.prefix import PrefixCache
from dllm_bench.decoding.policies import (
    POLICIES,
    BlockPolicy,
    DPadPolicy,
    DreamPolicy,
    DreamThresholdPolicy,
    Policy,
    SlowFastPolicy,
    WinoPolicy,
    build_policy,
    policy_parameters,
)
from dllm_bench.decoding.rules import RULES, build_rule, rule_parameters
from dllm_bench.decoding.rules.base import Rule
from dllm_bench.decoding.rules.factor import FactorRule
from dllm_bench.decoding.rules.frechet import FrechetRule
from dllm_bench.decoding.rules.oracle import OracleRule
from dllm_bench.decoding.rules.threshold import ThresholdRule
from dllm_bench.decoding.rules.topk import REMASKING, TopKRule

# ---------------------------------------------------------------- rules (one file each in decoding/rules/)

__all__ = ["REMASKING", "RULES", "FactorRule", "FrechetRule", "OracleRule", "ThresholdRule",
           "TopKRule", "build_rule"]


# ---------------------------------------------------------------- policies (one file each in decoding/policies/)

POLICY_CLASSES = POLICIES  # the policy registry (name -> class), filled where each policy is defined
__all__ += ["POLICIES", "POLICY_CLASSES", "BlockPolicy", "DPadPolicy", "DreamPolicy", "DreamThresholdPolicy", "Policy",
            "SlowFastPolicy", "WinoPolicy", "build_policy"]


# ---------------------------------------------------------------- caches (one file each in decoding/caches/)

__all__ += ["CACHES", "DLLMCache", "DualCache", "NoCache", "PrefixCache", "build_cache"]


def builder_parameters(kind: str, name: str) -> tuple[str, ...] | None:
    """Parameter names ``build_<kind>(name, ...)`` accepts (kind: rule, policy, cache); None for unknown names.

    The runner's config groups use exactly these names as keys (docs/runner.md).
    """
    if kind == "rule":
        return rule_parameters(name)
    if kind == "cache":
        return cache_parameters(name)
    return policy_parameters(name)


def check_combination(
    policy: Policy, rule: Rule | None, cache: Cache, *, gen_length: int, block_length: int,
    cfg_scale: float = 0.0,
) -> None:
    """Raise ValueError naming the bad value when a policy/rule/cache/length combination cannot run: the
    lengths, then what the policy accepts, the rule's and the cache's own checks, and guidance."""
    if gen_length < 1 or block_length < 1:
        raise ValueError(f"gen_length and block_length must be >= 1, got {gen_length}, {block_length}")
    if getattr(policy, "blocks_from_answer", True) and gen_length % block_length:
        raise ValueError(f"gen_length {gen_length} is not a multiple of block_length {block_length}")
    policy.check_combination(rule, cache, gen_length=gen_length, block_length=block_length, cfg_scale=cfg_scale)
    if rule is not None:
        rule.check_combination(policy=policy, cache=cache, gen_length=gen_length, block_length=block_length)
    cache.check_combination(policy=policy, rule=rule, gen_length=gen_length, block_length=block_length)
    if cfg_scale < 0:
        raise ValueError(f"cfg_scale must be >= 0, got {cfg_scale}")
    if cfg_scale > 0 and not cache.stateless:
        raise ValueError(f"classifier-free guidance runs only without a cache, got cache {cache.name!r}")
