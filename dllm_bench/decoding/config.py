"""Plain-value configuration of selectors, policies and caches, with builders that validate early.

The runner builds these from Hydra config: ``build_selector(name, **params)``, ``build_policy(name,
**params)``, ``build_cache(name, **params)``; ``check_combination`` rejects pairs that cannot run together.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from dllm_bench.decoding.policies import (
    SLOWFAST_PRESETS,
    BlockPolicy,
    DreamPolicy,
    DreamThresholdPolicy,
    SlowFastPolicy,
    WinoPolicy,
)
from dllm_bench.decoding.rules import RULES, build_rule, rule_parameters
from dllm_bench.decoding.rules.factor import FactorSelector
from dllm_bench.decoding.rules.frechet import FrechetSelector
from dllm_bench.decoding.rules.oracle import OracleSelector
from dllm_bench.decoding.rules.threshold import ThresholdSelector
from dllm_bench.decoding.rules.topk import REMASKING, TopKSelector

# ---------------------------------------------------------------- rules (one file each in decoding/rules/)

Selector = Any  # any registered rule (decoding.rules.Rule)
SELECTORS = RULES  # the rule registry, filled where each rule is defined
build_selector = build_rule
__all__ = ["REMASKING", "SELECTORS", "FactorSelector", "FrechetSelector", "OracleSelector", "ThresholdSelector",
           "TopKSelector", "build_selector"]


def init_fields(cls) -> tuple[str, ...]:
    """The parameters a selector/policy/cache dataclass takes (its init fields), in declaration order."""
    return tuple(f.name for f in fields(cls) if f.init)


def _check_params(kind: str, name: str, cls, params: dict) -> None:
    allowed = set(init_fields(cls))
    unknown = set(params) - allowed
    if unknown:
        raise ValueError(f"{kind} {name!r} takes parameters {sorted(allowed)}, got unknown {sorted(unknown)}")


# ---------------------------------------------------------------- policies

Policy = BlockPolicy | DreamPolicy | DreamThresholdPolicy | SlowFastPolicy | WinoPolicy
POLICY_CLASSES = {"blocks": BlockPolicy, "dream": DreamPolicy, "dream_threshold": DreamThresholdPolicy,
                  "slowfast": SlowFastPolicy, "wino": WinoPolicy}
POLICIES = tuple(POLICY_CLASSES)


def build_policy(name: str, **params) -> Policy:
    """Policy from a name: blocks (steps=None|int), dream (steps, alg, eps), dream_threshold (steps, tau),
    slowfast (preset=..., overrides), wino (threshold, threshold_back)."""
    if name == "blocks":
        _check_params("policy", name, BlockPolicy, params)
        pol = BlockPolicy(**params)
        if pol.steps is not None and (isinstance(pol.steps, bool) or not isinstance(pol.steps, int) or pol.steps < 1):
            raise ValueError(f"blocks steps must be >= 1 or None, got {pol.steps}")
        return pol
    if name == "dream":
        _check_params("policy", name, DreamPolicy, params)
        pol = DreamPolicy(**params)
        if pol.alg not in ("origin", "maskgit_plus", "topk_margin", "entropy"):
            raise ValueError(f"dream alg {pol.alg!r} is not one of origin, maskgit_plus, topk_margin, entropy")
        if isinstance(pol.steps, bool) or not isinstance(pol.steps, int) or pol.steps < 1:
            raise ValueError(f"dream steps must be an integer >= 1 (Dream runs a fixed number of steps), got {pol.steps}")
        return pol
    if name == "dream_threshold":
        _check_params("policy", name, DreamThresholdPolicy, params)
        pol = DreamThresholdPolicy(**params)
        if isinstance(pol.steps, bool) or not isinstance(pol.steps, int) or pol.steps < 1:
            raise ValueError(f"dream_threshold steps must be an integer >= 1 dividing gen_length, got {pol.steps!r}")
        if isinstance(pol.tau, bool) or not isinstance(pol.tau, int | float) or not 0 < pol.tau <= 1:
            raise ValueError(f"dream_threshold tau must be a number in (0, 1], got {pol.tau!r}")
        return pol
    if name == "slowfast":
        preset = params.pop("preset", "code")
        if preset not in SLOWFAST_PRESETS:
            raise ValueError(f"slowfast preset {preset!r} is not one of {sorted(SLOWFAST_PRESETS)}")
        _check_params("policy", name, SlowFastPolicy, params)
        pol = SlowFastPolicy(**{**SLOWFAST_PRESETS[preset], **params})
        if pol.explore_steps < 1 or pol.stability_window < 1:
            raise ValueError(f"slowfast explore_steps and stability_window must be >= 1, got {pol}")
        for tau_name in ("tau_min", "tau_high"):
            if not 0 <= getattr(pol, tau_name) <= 1:
                raise ValueError(f"slowfast {tau_name} must be in [0, 1], got {getattr(pol, tau_name)}")
        if pol.variant not in ("llada", "dream"):
            raise ValueError(f"slowfast variant {pol.variant!r} is not one of llada, dream")
        return pol
    if name == "wino":
        _check_params("policy", name, WinoPolicy, params)
        pol = WinoPolicy(**params)
        for key in ("threshold", "threshold_back"):
            value = getattr(pol, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"wino {key} must be a number in [0, 1], got {value!r}")
        return pol
    raise ValueError(f"policy {name!r} is not one of {POLICIES}")


# ---------------------------------------------------------------- caches


@dataclass(frozen=True)
class NoCache:
    """Every step is a full forward over the whole canvas."""

    name: str = field(default="none", init=False)


@dataclass(frozen=True)
class PrefixCache:
    """Fast-dLLM prefix cache: full forward at each block start (and every ``refresh_every`` steps),
    then recompute [block start, end of canvas) against cached K/V of the prefix.

    ``compat_first_token`` reproduces Fast-dLLM's Dream loop: the refresh forward commits only the block's
    first position, whatever its confidence.
    """

    refresh_every: int | None = None
    compat_first_token: bool = False
    name: str = field(default="prefix", init=False)


@dataclass(frozen=True)
class DualCache:
    """Fast-dLLM dual cache: full forward at each block start, then only the block, writing its K/V in place.
    Runs until the block is full (the published loop stops after steps_per_block - 1 cached steps)."""

    refresh_every: int | None = None
    compat_first_token: bool = False
    name: str = field(default="dual", init=False)


@dataclass(frozen=True)
class DLLMCache:
    """dLLM-Cache: prompt refreshed every K_p forwards, response every K_r, V-verify ratio rho on the rest.

    ``verify_compat`` ranks V-verify's rows as the published hook (similarity in the V dtype, ``torch.topk``)
    instead of the CPU-independent float64 rule (:func:`dllm_bench.models.cache.least_similar_rows`).
    """

    prompt_interval: int = 100  # dLLM-Cache's LLaDA-Base setting; its LLaDA-Instruct GSM8K run used 50/7
    response_interval: int = 6
    verify_ratio: float = 0.25
    layer0_always: bool = True
    verify_compat: bool = False
    name: str = field(default="dllm", init=False)

    def plan(self, forward_index: int) -> tuple[bool, bool, float]:
        """(refresh_prompt, refresh_response, verify_ratio) for the 1-based forward count."""
        refresh_prompt = (forward_index - 1) % self.prompt_interval == 0
        refresh_response = (forward_index - 1) % self.response_interval == 0
        return refresh_prompt, refresh_response, (0.0 if refresh_response else self.verify_ratio)


Cache = NoCache | PrefixCache | DualCache | DLLMCache
CACHES = {"none": NoCache, "prefix": PrefixCache, "dual": DualCache, "dllm": DLLMCache}


def build_cache(name: str, **params) -> Cache:
    """Cache from a name: none; prefix/dual (refresh_every, compat_first_token); dllm (prompt_interval,
    response_interval, verify_ratio, layer0_always, verify_compat)."""
    if name not in CACHES:
        raise ValueError(f"cache {name!r} is not one of {sorted(CACHES)}")
    cls = CACHES[name]
    _check_params("cache", name, cls, params)
    cache = cls(**params)
    if name in ("prefix", "dual") and cache.refresh_every is not None and cache.refresh_every < 1:
        raise ValueError(f"{name} refresh_every must be >= 1 or None, got {cache.refresh_every}")
    if name == "dllm":
        if cache.prompt_interval < 1 or cache.response_interval < 1:
            raise ValueError(
                f"dllm prompt_interval and response_interval must be >= 1 (1 = every forward), got "
                f"{cache.prompt_interval}, {cache.response_interval}"
            )
        if not 0 <= cache.verify_ratio <= 1:
            raise ValueError(f"dllm verify_ratio must be in [0, 1], got {cache.verify_ratio}")
    return cache


def builder_parameters(kind: str, name: str) -> tuple[str, ...] | None:
    """Parameter names ``build_<kind>(name, ...)`` accepts (kind: selector, policy, cache); None for unknown names.

    The runner's config groups use exactly these names as keys (docs/runner.md).
    """
    if kind in ("selector", "rule"):
        return rule_parameters(name)
    registry = {"policy": POLICY_CLASSES, "cache": CACHES}[kind]
    cls = registry.get(name)
    return None if cls is None else init_fields(cls)


def check_combination(
    policy: Policy, selector: Selector | None, cache: Cache, *, gen_length: int, block_length: int,
    cfg_scale: float = 0.0,
) -> None:
    """Raise ValueError naming the bad value when a policy/selector/cache/length combination cannot run."""
    if gen_length < 1 or block_length < 1:
        raise ValueError(f"gen_length and block_length must be >= 1, got {gen_length}, {block_length}")
    if gen_length % block_length:
        raise ValueError(f"gen_length {gen_length} is not a multiple of block_length {block_length}")
    num_blocks = gen_length // block_length
    if isinstance(policy, BlockPolicy):
        if selector is None:
            raise ValueError(f"policy 'blocks' has no commit rule of its own: choose a rule ({', '.join(sorted(RULES))})")
        if selector.adaptive and policy.steps is not None:
            raise ValueError(
                f"rule {selector.name!r} is adaptive (a block runs until full): policy 'blocks' needs steps=None, "
                f"got steps={policy.steps}"
            )
        if policy.steps is not None and policy.steps % num_blocks:
            raise ValueError(f"steps {policy.steps} is not divisible by the number of blocks {num_blocks}")
    elif isinstance(policy, DreamPolicy):
        if selector is not None:
            raise ValueError(
                f"policy 'dream' commits its timestep schedule's count ranked by its alg, so rule must be none, got "
                f"{selector.name!r} (an adaptive rule on Dream's whole canvas: policy blocks with block_length = "
                "gen_length)"
            )
        if block_length != gen_length:
            raise ValueError(f"policy 'dream' has no blocks: block_length {block_length} must equal gen_length {gen_length}")
    elif isinstance(policy, DreamThresholdPolicy):
        _check_dream_threshold(policy, selector, cache, gen_length, block_length, cfg_scale)
    elif isinstance(policy, SlowFastPolicy):
        if selector is not None and not selector.adaptive:
            adaptive = ", ".join(n for n, cls in sorted(RULES.items()) if cls.adaptive)
            raise ValueError(
                f"policy 'slowfast' takes an adaptive rule for its fast phase ({adaptive}) "
                f"or none (its own tau_high rule), got {selector.name!r}"
            )
        if selector is not None and selector.measure != "top1_prob":
            raise ValueError(f"policy 'slowfast' explores by top-1 probability (tau_min, explore_tau), so its fast "
                             f"phase's rule must rank by it too; rule {selector.name!r} ranks by {selector.measure!r}")
        if policy.variant == "dream" and block_length != gen_length:
            raise ValueError(f"slowfast variant 'dream' has no blocks: block_length {block_length} must equal gen_length")
        if policy.truncate_fast and not isinstance(cache, NoCache | DLLMCache):
            raise ValueError(
                f"slowfast truncate_fast (published fast phase) runs without a cache or with 'dllm', got {cache.name!r}"
            )
    elif isinstance(policy, WinoPolicy):
        if selector is not None:
            raise ValueError(f"policy 'wino' has its own commit rule (wide in > threshold, narrow out < "
                             f"threshold_back): rule must be none, got {selector.name!r}")
        if not isinstance(cache, NoCache):
            raise ValueError(f"policy 'wino' runs only without a cache (the published loop recomputes the whole "
                             f"canvas and its shadow block every step), got cache {cache.name!r}")
        if cfg_scale != 0:
            raise ValueError(f"policy 'wino' has no classifier-free guidance (the published loop has none), "
                             f"got cfg_scale {cfg_scale}")
    else:
        raise ValueError(f"unknown policy {policy!r}")
    if selector is not None:
        selector.check_combination(policy=policy, cache=cache, gen_length=gen_length, block_length=block_length)
    if isinstance(cache, PrefixCache | DualCache) and cache.compat_first_token:
        per_block = (policy.steps // num_blocks if isinstance(policy, BlockPolicy) and policy.steps is not None
                     else policy.steps if isinstance(policy, DreamPolicy) else None)
        if per_block == 1:
            raise ValueError(
                f"{cache.name} compat_first_token commits only a block's first position at its refresh, so a fixed "
                f"schedule of 1 step per block would leave masks; give at least 2 steps per block or drop the compat"
            )
    if cfg_scale < 0:
        raise ValueError(f"cfg_scale must be >= 0, got {cfg_scale}")
    if cfg_scale > 0 and not isinstance(cache, NoCache):
        raise ValueError(f"classifier-free guidance runs only without a cache, got cache {cache.name!r}")


def _check_dream_threshold(policy: DreamThresholdPolicy, selector: Selector | None, cache: Cache, gen_length: int,
                           block_length: int, cfg_scale: float) -> None:
    """Refuse what Fast-dLLM's Dream ``confidence_threshold`` loop never ran (its ``generation_utils.py``)."""
    if selector is not None:
        raise ValueError(f"policy 'dream_threshold' has its own commit rule (top-1 plus every slot >= tau); "
                         f"selector must be None, got {selector.name!r}")
    if block_length != gen_length:
        raise ValueError(f"policy 'dream_threshold' has no blocks (the published loop decodes the whole answer): "
                         f"block_length {block_length} must equal gen_length {gen_length}")
    if gen_length % policy.steps:
        raise ValueError(f"dream_threshold steps {policy.steps} must divide gen_length {gen_length} "
                         f"(the published loop asserts it: the per-step quota is gen_length / steps)")
    if not isinstance(cache, NoCache):
        raise ValueError(f"policy 'dream_threshold' runs only without a cache, got {cache.name!r}: the published "
                         f"cached Dream runs are the blocked loop (policy blocks, threshold, prefix/dual cache with "
                         f"compat_first_token)")
    if cfg_scale != 0:
        raise ValueError(f"policy 'dream_threshold' has no classifier-free guidance (Dream's loop has none), "
                         f"got cfg_scale {cfg_scale}")
