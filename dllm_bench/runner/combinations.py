"""Which policy x rule x cache combinations run, and the setting that makes each run: asked of the methods
themselves (their builders, ``check_combination`` and the flavours they declare), never a hand table, so that
every list of methods in tests, scripts and docs comes from the registries and the conf groups.

A combination names conf options (``conf/policy/slowfast_code.yaml``, ``conf/rule/threshold.yaml``, ...). It is
tried as configured, then with the policy's ``steps`` set to ``gen_length`` (a fixed-step schedule, where the policy
takes steps), then as one block (``block_length = gen_length``), then both; the first the methods accept is its
setting, and when none is accepted the last refusal is its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from dllm_bench.decoding import Decoding, build_cache, build_policy, build_rule, check_combination
from dllm_bench.decoding.config import CACHES
from dllm_bench.runner import config
from dllm_bench.runner.components import NO_RULE
from dllm_bench.runner.group_defaults import option_values

FLAVOURS = ("llada", "dream")


def conf(conf_dir: Path | None = None) -> Path:
    """``conf_dir``, else the runner's (``runner.config.CONF_DIR``, read at each call: a test may point it elsewhere)."""
    return Path(conf_dir if conf_dir is not None else config.CONF_DIR)


def options(group: str, conf_dir: Path | None = None) -> tuple[str, ...]:
    """The options of a conf group (its YAML files' stems), sorted."""
    return tuple(sorted(p.stem for p in (conf(conf_dir) / group).glob("*.yaml")))


@cache
def _option(group: str, option: str, conf_dir: Path) -> dict[str, Any]:
    return option_values(Path(conf_dir) / group / f"{option}.yaml")


def option_config(group: str, option: str, conf_dir: Path | None = None) -> dict[str, Any]:
    """An option's keys as composed (its ``name`` and the builder's parameters, defaults included)."""
    return dict(_option(group, option, conf(conf_dir)))


def option_name(group: str, option: str, conf_dir: Path | None = None) -> str:
    """The registered method an option selects (``slowfast_code`` -> ``slowfast``)."""
    return str(_option(group, option, conf(conf_dir))["name"])


def policy_flavours(policy: str) -> tuple[str, ...]:
    """The model flavours a policy runs on (the runner refuses others)."""
    from dllm_bench.runner.validate import policy_flavours as declared

    return declared(policy)


def flavours(policy: str, cache_name: str) -> tuple[str, ...]:
    """The model flavours (llada first) on which the policy and the cache both run."""
    out = []
    for flavour in policy_flavours(policy):
        try:
            CACHES[cache_name].check_flavour(flavour, policy)
        except ValueError:
            continue
        out.append(flavour)
    return tuple(out)


@dataclass(frozen=True)
class Setting:
    """A combination of conf options and what it needs to run: the policy's steps, one block, its flavours."""

    policy: str
    rule: str
    cache: str
    gen_length: int
    block_length: int
    steps: int | None  # the policy's steps set to this (None: as its option configures them)
    flavours: tuple[str, ...]

    def overrides(self) -> list[str]:
        """The runner's overrides selecting it (model and task aside)."""
        out = [f"policy={self.policy}", f"rule={self.rule}", f"cache={self.cache}", f"gen_length={self.gen_length}",
               f"block_length={self.block_length}"]
        return out + ([f"policy.steps={self.steps}"] if self.steps is not None else [])

    def groups(self, conf_dir: Path | None = None) -> dict[str, dict[str, Any]]:
        """The policy, rule and cache groups as the runner's config holds them."""
        policy = option_config("policy", self.policy, conf_dir)
        if self.steps is not None:
            policy["steps"] = self.steps
        return {"policy": policy, "rule": option_config("rule", self.rule, conf_dir),
                "cache": option_config("cache", self.cache, conf_dir)}

    def decoding(self, conf_dir: Path | None = None, **params: Any) -> Decoding:
        """The engine's ``Decoding`` of it (keyword arguments go to ``Decoding``: early_stop, ...)."""
        return Decoding(self.gen_length, self.block_length, *_components(self.groups(conf_dir)), **params)


def _params(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "name"}


def _components(groups: dict[str, dict[str, Any]]) -> tuple[Any, Any, Any]:
    policy = build_policy(groups["policy"]["name"], **_params(groups["policy"]))
    rule_name = groups["rule"]["name"]
    rule = None if rule_name == NO_RULE else build_rule(rule_name, **_params(groups["rule"]))
    return policy, rule, build_cache(groups["cache"]["name"], **_params(groups["cache"]))


class Refused(ValueError):
    """No way of running a combination is accepted; the message is the methods' own reason, ``setting`` the way
    it was refused in (None when the policy runs in none of the ways)."""

    def __init__(self, message: str, setting: Setting | None = None) -> None:
        super().__init__(message)
        self.setting = setting


def find_setting(policy: str, rule: str, cache_option: str = "none", *, gen_length: int = 24,
                 block_length: int = 8, conf_dir: Path | None = None) -> Setting:
    """The first way the methods accept to run the options together (module docstring); ``Refused`` otherwise."""
    takes_steps = "steps" in option_config("policy", policy, conf_dir)
    cache_name = option_name("cache", cache_option, conf_dir)
    ways = [(steps, block) for block in dict.fromkeys((block_length, gen_length))
            for steps in ((None, gen_length) if takes_steps else (None,))]
    refusals: list[tuple[Exception, Setting]] = []
    for steps, block in ways:
        setting = Setting(policy, rule, cache_option, gen_length, block, steps,
                          flavours(option_name("policy", policy, conf_dir), cache_name))
        groups = setting.groups(conf_dir)
        try:
            check_combination(*_components(groups), gen_length=gen_length, block_length=block)
            if not setting.flavours:
                raise ValueError(f"policy {groups['policy']['name']!r} and cache {cache_name!r} share no model "
                                 f"flavour of {', '.join(FLAVOURS)}")
        except (ValueError, TypeError) as err:
            if _policy_runs(policy, steps, block, gen_length, conf(conf_dir)):
                refusals.append((err, setting))  # the reason: a refusal under a way the policy itself runs (some rule, no cache)
            continue
        return setting
    if not refusals:
        raise Refused(f"policy {policy!r} runs in none of the ways tried")
    raise Refused(str(refusals[0][0]), refusals[0][1])


@cache
def _policy_runs(policy: str, steps: int | None, block: int, gen_length: int, conf_dir: Path) -> bool:
    """Whether the policy option runs at this steps and block with some rule option and no cache."""
    for rule in options("rule", conf_dir):
        groups = Setting(policy, rule, "none", gen_length, block, steps, FLAVOURS).groups(conf_dir)
        try:
            check_combination(*_components(groups), gen_length=gen_length, block_length=block)
        except (ValueError, TypeError):
            continue
        return True
    return False


def runs(policy: str, rule: str, cache_option: str = "none", **kwargs: Any) -> bool:
    """Whether ``find_setting`` finds a way."""
    try:
        find_setting(policy, rule, cache_option, **kwargs)
    except Refused:
        return False
    return True


def first_rule(policy: str, cache_option: str = "none", prefer: tuple[str, ...] = (NO_RULE, "threshold", "topk"),
               conf_dir: Path | None = None, **kwargs: Any) -> Setting | None:
    """The setting of the first rule option (``prefer`` first, then the rest sorted) that runs with the policy and
    cache options; None when none does."""
    rules = options("rule", conf_dir)
    for rule in [*(r for r in prefer if r in rules), *(r for r in rules if r not in prefer)]:
        try:
            return find_setting(policy, rule, cache_option, conf_dir=conf_dir, **kwargs)
        except Refused:
            continue
    return None


@dataclass(frozen=True)
class Exercise:
    """One method's setting on one model flavour: what the bf16 tier and the sync count run for it."""

    label: str  # policy/rule/cache options, then @flavour
    setting: Setting
    flavour: str
    model_switches: tuple[tuple[str, str], ...] = ()  # load_model's switches the cache needs (CacheBase.model_switches)


def exercises(gen_length: int = 24, block_length: int = 8, conf_dir: Path | None = None) -> list[Exercise]:
    """Each method once in a setting that runs it, without a cache unless it is the cache: every policy option
    with its first running rule (none, threshold, topk, then the rest) on each flavour it runs on; every rule
    option under policy blocks (else the first policy that runs it) on its first flavour; every cache option
    with policy blocks (else the first policy that runs it) and its first running rule on each flavour."""
    kwargs = {"gen_length": gen_length, "block_length": block_length, "conf_dir": conf_dir}
    policies = sorted(options("policy", conf_dir), key=lambda p: p != "blocks")
    found: list[tuple[Setting, tuple[str, ...]]] = []
    for policy in policies:
        setting = first_rule(policy, **kwargs)
        if setting is not None:
            found.append((setting, setting.flavours))
    for rule in options("rule", conf_dir):
        for policy in policies:
            if runs(policy, rule, **kwargs):
                setting = find_setting(policy, rule, **kwargs)
                found.append((setting, setting.flavours[:1]))
                break
    for cache_option in options("cache", conf_dir):
        setting = next((s for p in policies if (s := first_rule(p, cache_option, **kwargs)) is not None), None)
        if setting is not None:
            found.append((setting, setting.flavours))
    out: dict[tuple[str, str], Exercise] = {}
    for setting, flavour_list in found:
        for flavour in flavour_list:
            label = f"{setting.policy}/{setting.rule}/{setting.cache}@{flavour}"
            switches = CACHES[option_name("cache", setting.cache, conf_dir)].model_switches
            out.setdefault((label, flavour), Exercise(label, setting, flavour, tuple(sorted(switches.items()))))
    return list(out.values())
