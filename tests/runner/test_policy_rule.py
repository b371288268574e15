"""Every policy x rule pair either runs on the tiny model or is refused before loading, with the methods' own reason.

The pairs are the conf groups' options; whether a pair runs, and with what steps and block length, is asked of the
methods (``dllm_bench.runner.combinations``: their builders and ``check_combination``), so a new rule or policy
is covered here by its own files alone. make test runs the pairs that cover each policy and each rule running and
refused; -m exhaustive every pair.
"""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from dllm_bench.decoding.config import POLICIES
from dllm_bench.decoding.rules import RULES
from dllm_bench.runner.combinations import Refused, find_setting, option_name, options
from dllm_bench.runner.components import NO_RULE
from dllm_bench.runner.config import CONF_DIR
from dllm_bench.runner.execute import execute
from dllm_bench.runner.validate import ConfigError, validate_config
from tests.decoding.published_goldens import covering_settings

PAIRS = [(p, r) for p in options("policy") for r in options("rule")]
TINY = {"llada": "tiny_llada", "dream": "tiny_dream"}
# Refusals the docs quote (docs/decoding.md, "Policy x rule"): the derived reasons must keep saying them.
DOCUMENTED = {
    ("blocks", NO_RULE): "policy 'blocks' has no commit rule of its own",
    ("dream", "threshold"): "policy 'dream' commits its timestep schedule's count ranked by its alg, so rule must be none",
    ("slowfast_code", "topk"): "policy 'slowfast' takes an adaptive rule for its fast phase",
    ("slowfast_code", "entropy_threshold"): "policy 'slowfast' explores by top-1 probability",
    ("wino", "threshold"): "policy 'wino' has its own commit rule",
    ("dpad", "klass"): "rule 'klass' counts its steps per block of policy 'blocks'",
    ("dpad", "credit"): "rule 'credit' keeps its credit per block of policy 'blocks'",
}


def runner_overrides(policy: str, rule: str, tmp_path) -> tuple[list[str], str | None]:
    """The runner's overrides of a pair (its setting where it runs, as configured where refused) and the reason
    it is refused (None where it runs)."""
    try:
        setting, reason = find_setting(policy, rule), None
    except Refused as err:
        setting, reason = err.setting, str(err)
    model = TINY[setting.flavours[0]] if setting.flavours else TINY["llada"]
    return [*setting.overrides(), f"model={model}", *common(tmp_path)], reason


def common(tmp_path) -> list[str]:
    return [f"output_dir={tmp_path}", "limit=2", "batch_size=2", "warmup=0", "progress=false", "num_threads=1"]


def test_every_option_names_a_registered_method_and_every_method_has_an_option():
    policies = {option_name("policy", o) for o in options("policy")}
    rules = {option_name("rule", o) for o in options("rule")}
    assert policies == set(POLICIES)
    assert rules == {*RULES, NO_RULE}
    assert all(option_name("rule", o) == o for o in options("rule"))  # a rule's option is its name


@pytest.mark.parametrize("pair", list(DOCUMENTED), ids=lambda p: "-".join(p))
def test_the_documented_refusals_are_the_derived_reasons(pair):
    with pytest.raises(Refused, match=DOCUMENTED[pair]):
        find_setting(*pair)


def test_every_policy_runs_with_some_rule_and_every_rule_with_some_policy():
    running = [pair for pair in PAIRS if not _refused(*pair)]
    assert {p for p, _ in running} == set(options("policy"))
    assert {r for _, r in running} == set(options("rule"))


def _refused(policy: str, rule: str) -> bool:
    try:
        find_setting(policy, rule)
    except Refused:
        return True
    return False


def _sampled_pairs() -> list:
    """make test: the running pairs in which each policy and each rule runs, and the refused pairs in which each
    policy and each rule is refused (tests/decoding/published_goldens.covering_settings); every pair under -m
    exhaustive."""
    default = set()
    for refused in (False, True):
        pairs = [pair for pair in PAIRS if _refused(*pair) == refused]
        chosen = covering_settings([{"policy": p, "rule": r} for p, r in pairs], lambda pair: pair)
        default |= {pairs[i] for i in chosen}
    return [pytest.param(*pair, id="-".join(pair), marks=[] if pair in default else [pytest.mark.exhaustive])
            for pair in PAIRS]


@pytest.mark.slow
@pytest.mark.parametrize("policy, rule", _sampled_pairs())
def test_pair_runs_or_is_refused_with_its_reason(policy, rule, tmp_path):
    overrides, reason = runner_overrides(policy, rule, tmp_path)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    if reason is not None:
        with pytest.raises(ConfigError) as err:
            validate_config(cfg)
        assert reason in str(err.value) and "\n" not in str(err.value)
        return
    row = execute(cfg)
    assert row["n_samples"] == 2 and row["nfe_mean"] >= 1
    assert row["policy.name"] == validate_config(cfg).policy.name and row["rule.name"] == rule


@pytest.mark.slow
def test_slowfast_with_rule_threshold_at_tau_high_is_its_own_rule(tmp_path):
    """The published phase rule (all >= threshold, else top-1) is the threshold rule at threshold: same decode."""
    rows = []
    for extra in (["rule=none"], ["rule=threshold", "rule.threshold=0.9"], ["rule=threshold", "rule.threshold=0.3"]):
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            # one exploration step per span, so the fast phase commits most of each block
            cfg = compose("config", overrides=["policy=slowfast_code", "policy.explore_steps=1", f"output_dir={tmp_path}",
                                               "limit=8", "batch_size=8", "warmup=0", "progress=false", "num_threads=1",
                                               f"name=r{len(rows)}", *extra])
        row = execute(cfg)
        samples = (tmp_path / row["name"] / row["run_id"] / "samples.jsonl").read_text().splitlines()
        rows.append([(s["completion"], s["nfe"]) for s in map(json.loads, samples)])
    assert rows[0] == rows[1]
    assert rows[2] != rows[0]  # a lower fast-phase threshold decides differently on the same problems
