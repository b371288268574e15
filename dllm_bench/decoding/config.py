"""Plain-value configuration of selectors, policies and caches, with builders that validate early.

The runner builds these from Hydra config: ``build_selector(name, **params)``, ``build_policy(name,
**params)``, ``build_cache(name, **params)`` (the rules' and caches' registries, filled in ``decoding/rules/`` and
``decoding/caches/``); ``check_combination`` rejects pairs that cannot run together.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from dllm_bench.decoding.caches import CACHES, build_cache, cache_parameters
from dllm_bench.decoding.caches.dllm import DLLMCache
from dllm_bench.decoding.caches.dual import DualCache
from dllm_bench.decoding.caches.none import NoCache
from dllm_bench.decoding.caches.prefix import PrefixCache
from dllm_bench.decoding.policies import (
    SLOWFAST_PRESETS,
    BlockPolicy,
    DPadPolicy,
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

Policy = BlockPolicy | DPadPolicy | DreamPolicy | DreamThresholdPolicy | SlowFastPolicy | WinoPolicy
POLICY_CLASSES = {"blocks": BlockPolicy, "dpad": DPadPolicy, "dream": DreamPolicy,
                  "dream_threshold": DreamThresholdPolicy, "slowfast": SlowFastPolicy, "wino": WinoPolicy}
POLICIES = tuple(POLICY_CLASSES)


def build_policy(name: str, **params) -> Policy:
    """Policy from a name: blocks (steps=None|int), dpad (steps, suffix_window, sigma, scale, early_termination,
    rng), dream (steps, alg, eps), dream_threshold (steps, tau), slowfast (preset=..., overrides),
    wino (threshold, threshold_back)."""
    if name in ("blocks", "dpad"):
        cls = POLICY_CLASSES[name]
        _check_params("policy", name, cls, params)
        pol = cls(**params)
        if pol.steps is not None and (isinstance(pol.steps, bool) or not isinstance(pol.steps, int) or pol.steps < 1):
            raise ValueError(f"{name} steps must be >= 1 or None, got {pol.steps}")
        if name == "dpad":
            _check_dpad(pol)
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


def _check_dpad(pol: DPadPolicy) -> None:
    """Refuse DPad parameters its sampler cannot take (the window against gen_length: ``check_combination``)."""
    if pol.suffix_window is not None and (isinstance(pol.suffix_window, bool) or not isinstance(pol.suffix_window, int)
                                       or pol.suffix_window < 1):
        raise ValueError(f"dpad suffix_window must be an integer >= 1 or None (the whole answer), got {pol.suffix_window!r}")
    for key in ("sigma", "scale"):
        value = getattr(pol, key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"dpad {key} must be a number > 0, got {value!r}")
    if pol.rng not in ("row", "global"):
        raise ValueError(f"dpad rng {pol.rng!r} is not one of row, global")
    if not isinstance(pol.early_termination, bool):
        raise ValueError(f"dpad early_termination must be true or false, got {pol.early_termination!r}")


# ---------------------------------------------------------------- caches (one file each in decoding/caches/)

Cache = Any  # any registered cache (decoding.caches.Cache)
__all__ += ["CACHES", "DLLMCache", "DualCache", "NoCache", "PrefixCache", "build_cache"]


def builder_parameters(kind: str, name: str) -> tuple[str, ...] | None:
    """Parameter names ``build_<kind>(name, ...)`` accepts (kind: selector, policy, cache); None for unknown names.

    The runner's config groups use exactly these names as keys (docs/runner.md).
    """
    if kind in ("selector", "rule"):
        return rule_parameters(name)
    if kind == "cache":
        return cache_parameters(name)
    cls = POLICY_CLASSES.get(name)
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
            raise ValueError(f"policy {policy.name!r} has no commit rule of its own: choose a rule ({', '.join(sorted(RULES))})")
        if selector.adaptive and not getattr(selector, "takes_steps", False) and policy.steps is not None:
            raise ValueError(
                f"rule {selector.name!r} is adaptive (a block runs until full): policy {policy.name!r} needs steps=None, "
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
        if policy.truncate_fast and not cache.shorter_canvas:
            allowed = " or ".join(repr(n) for n, cls in CACHES.items() if cls.shorter_canvas and not cls.stateless)
            raise ValueError(
                f"slowfast truncate_fast (published fast phase) runs without a cache or with {allowed}, got {cache.name!r}"
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
    if isinstance(policy, DPadPolicy):
        if policy.suffix_window is not None and policy.suffix_window > gen_length:
            raise ValueError(f"dpad suffix_window {policy.suffix_window} is longer than gen_length {gen_length} (DPad asserts it)")
        if cache.name not in ("none", "prefix", "dual"):
            raise ValueError(f"dpad runs without a cache or with prefix/dual (its published loops), got {cache.name!r}")
        if cfg_scale != 0:
            raise ValueError(f"dpad has no classifier-free guidance (its loops have none), got cfg_scale {cfg_scale}")
    if selector is not None:
        selector.check_combination(policy=policy, cache=cache, gen_length=gen_length, block_length=block_length)
    cache.check_combination(policy=policy, selector=selector, gen_length=gen_length, block_length=block_length)
    if cfg_scale < 0:
        raise ValueError(f"cfg_scale must be >= 0, got {cfg_scale}")
    if cfg_scale > 0 and not cache.stateless:
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
    if not cache.stateless:
        raise ValueError(f"policy 'dream_threshold' runs only without a cache, got {cache.name!r}: the published "
                         f"cached Dream runs are the blocked loop (policy blocks, threshold, prefix/dual cache with "
                         f"compat_first_token)")
    if cfg_scale != 0:
        raise ValueError(f"policy 'dream_threshold' has no classifier-free guidance (Dream's loop has none), "
                         f"got cfg_scale {cfg_scale}")
