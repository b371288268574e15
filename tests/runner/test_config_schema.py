"""The config's keys are the code's parameters (tests/decoding/test_defaults_agree.py), and every key reaches the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from dllm_bench.decoding.config import builder_parameters
from dllm_bench.runner.components import build_components
from dllm_bench.runner.config import CONF_DIR
from dllm_bench.runner.group_defaults import option_values
from dllm_bench.runner.settings import (
    BACKENDS,
    GROUPS,
    BackendSettings,
    ModelSettings,
    RunSettings,
    setting_names,
)
from dllm_bench.runner.validate import validate_config

pytestmark = pytest.mark.fast  # the inner loop: make test-fast

KINDS = {"policy": "policy", "rule": "rule", "cache": "cache"}


def group_files(group: str) -> list[Path]:
    return sorted((CONF_DIR / group).glob("*.yaml"))


def values(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    data.pop("defaults", None)
    return data


def test_top_level_and_model_keys_are_the_runner_settings():
    top = yaml.safe_load((CONF_DIR / "config.yaml").read_text(encoding="utf-8"))
    assert set(top) - {"defaults", "hydra"} == set(setting_names(RunSettings))
    assert [next(iter(d)) for d in top["defaults"] if isinstance(d, dict)] == ["model", "task", "cache", "rule",
                                                                            "policy", "backend", "tracking",
                                                                            "experiment", "hparams_search"]
    assert set(GROUPS) == {"model", "task", "cache", "rule", "policy"}
    for path in group_files("model"):  # its own keys over ModelSettings' defaults node (runner/group_defaults)
        assert set(option_values(path)) == set(setting_names(ModelSettings)), path
    assert sorted(p.stem for p in group_files("backend")) == sorted(BACKENDS)
    for path in group_files("backend"):  # local names itself only; a served backend sets every key
        wanted = {"name"} if path.stem == "local" else set(setting_names(BackendSettings))
        assert set(values(path)) == wanted and values(path)["name"] == path.stem, path


@pytest.fixture(scope="module")
def composed():
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        yield lambda *o: validate_config(compose("config", overrides=list(o)))


# (overrides selecting the option, the switch, a value other than the file's, the object the engine receives)
SWITCHES = [
    (["cache=dllm"], "cache.layer0_always", False, 2),
    (["cache=dllm"], "cache.prompt_interval", 7, 2),
    (["cache=dllm"], "cache.response_interval", 3, 2),
    (["cache=dllm"], "cache.verify_ratio", 0.5, 2),
    (["cache=dllm"], "cache.verify_compat", True, 2),
    (["cache=prefix"], "cache.refresh_every", 4, 2),
    (["cache=prefix"], "cache.compat_first_token", True, 2),
    (["cache=dual"], "cache.refresh_every", 4, 2),
    (["cache=dual"], "cache.compat_first_token", True, 2),
    (["rule=threshold"], "rule.threshold", 0.7, 1),
    (["rule=factor"], "rule.f", 1.0, 1),
    (["rule=factor"], "rule.compat", True, 1),
    (["rule=frechet"], "rule.delta", 0.1, 1),
    (["rule=eb_sampler"], "rule.entropy_budget", 0.1, 1),
    (["rule=entropy_threshold"], "rule.max_entropy", 0.45, 1),
    (["rule=hierarchy"], "rule.low_threshold", 0.3, 1),
    (["rule=hierarchy"], "rule.threshold", 0.8, 1),
    (["rule=local_leap"], "rule.threshold", 0.95, 1),
    (["rule=local_leap"], "rule.relaxed_threshold", 0.8, 1),
    (["rule=local_leap"], "rule.radius", 2, 1),
    (["rule=credit"], "rule.threshold", 0.8, 1),
    (["rule=credit"], "rule.alpha", 1.0, 1),
    (["rule=credit"], "rule.gamma", 0.5, 1),
    (["rule=credit"], "rule.beta", 0.5, 1),
    (["rule=topk", "policy.steps=24"], "rule.remasking", "random", 1),
    (["rule=topk", "policy.steps=24"], "policy.steps", 12, 0),
    *[(["policy=slowfast_code"], f"policy.{k}", v, 0) for k, v in [
        ("explore_steps", 3), ("converge_threshold", 0.2), ("stability_window", 3), ("stability_threshold", 0.5),
        ("threshold", 0.8), ("explore_threshold", 0.7), ("min_parallel", 3), ("truncate_fast", True)]],
    (["policy=slowfast_code", "gen_length=24", "block_length=24"], "policy.flavour", "dream", 0),
    *[(["policy=dpad"], f"policy.{k}", v, 0) for k, v in [
        ("suffix_window", 8), ("max_sd", 3.0), ("scale", 2.3), ("early_termination", False), ("rng", "global")]],
    (["policy=dpad", "rule=topk", "policy.steps=12"], "policy.steps", 24, 0),  # topk needs steps: 12 -> 24
    (["policy=wino"], "policy.threshold", 0.5, 0),
    *[(["policy=pipeline_d2f_llada"], f"policy.{k}", v, 0) for k, v in [
        ("block_add_threshold", 0.3), ("decoded_token_threshold", 0.8), ("threshold", 0.8), ("max_entropy", 0.2),
        ("method", "d3llm")]],
    *[(["policy=llada21_dllm"], f"policy.{k}", v, 0) for k, v in [
        ("threshold", 0.8), ("edit_threshold", 0.7), ("max_post_steps", 4), ("min_commit", 2), ("loop", "sglang")]],
    *[(["policy=dmax_math"], f"policy.{k}", v, 0) for k, v in [("threshold", 0.7), ("settle", 0.8), ("prefill", True),
                                                                 ("eos_stop", True)]],
    *[(["policy=fast_dllm_v2"], f"policy.{k}", v, 0) for k, v in [
        ("sub_block", 4), ("steps", 8), ("threshold", 0.5), ("kv_cache", "none")]],
    (["policy=sdar"], "policy.sdar_topk", True, 0),
    (["policy=llada21_dllm"], "policy.stop_after_block", True, 0),
    (["policy=wino"], "policy.threshold_back", 0.95, 0),
    (["rule=klass"], "rule.threshold", 0.9, 1),
    (["rule=klass"], "rule.kl_threshold", 0.01, 1),
    (["rule=klass"], "rule.history_length", 3, 1),
    (["rule=klass"], "rule.flavour", "dream", 1),
    (["rule=pc_sampler", "policy.steps=24"], "rule.lambd", 0.0, 1),
    (["rule=pc_sampler", "policy.steps=24"], "rule.alpha", 1.0, 1),
    (["rule=pc_sampler", "policy.steps=24"], "rule.reference_corpus", "tiny_dream", 1),
    (["rule=certainty_prior", "policy.steps=24"], "rule.sigma", 3.0, 1),
    (["cache=dkv", "rule=topk", "policy.steps=24"], "cache.refresh_every", 4, 2),
    (["cache=sparse_dllm"], "cache.keep_ratio", 0.7, 2),
    (["cache=sparse_dllm"], "cache.kernel_size", 5, 2),
    *[(["cache=d2cache"], f"cache.{k}", v, 2) for k, v in [
        ("rollout_p", 0.2), ("current_k", 8), ("sigma", 3.0), ("inflate_w", 4), ("top_up", True)]],
    *[(["cache=elastic"], f"cache.{k}", v, 2) for k, v in [
        ("window", 8), ("min_cosine", 0.8), ("track_num", 2), ("refresh_drifting_layer", True)]],
]


@pytest.mark.parametrize("base, key, value, index", SWITCHES, ids=lambda x: x if isinstance(x, str) else None)
def test_every_documented_switch_changes_what_the_engine_receives(composed, base, key, value, index):
    before = build_components(composed(*base))[index]
    after = build_components(composed(*base, f"{key}={yaml.safe_dump(value).splitlines()[0]}"))[index]
    name = key.split(".", 1)[1]
    assert getattr(after, name) == value and getattr(before, name) != value


def test_every_decoding_key_is_covered_by_a_switch_test():
    covered = {key for _, key, _, _ in SWITCHES}
    for group, kind in KINDS.items():  # a group's keys are its registered classes' parameters (test_defaults_agree.py)
        for name in {values(p)["name"] for p in group_files(group)}:
            if name in ("dream", "dream_threshold", "none"):  # dream keys: test_policy_rule.py runs them
                continue
            for key in builder_parameters(kind, name):
                assert f"{group}.{key}" in covered, f"{group} {name}: {key} has no switch test"


@pytest.mark.parametrize("overrides, rule", [
    (["policy=slowfast_paper"], "none"),
    (["experiment=demo", "policy=slowfast_code"], "none"),
    (["experiment=tiny", "policy=dream"], "none"),
    (["policy=slowfast_code", "rule=frechet"], "frechet"),
    (["experiment=fast_dllm_pp_t1", "policy=slowfast_paper"], "frechet"),  # the experiment's rule wins (docs/runner.md)
])
def test_which_rule_a_policy_switch_gets(composed, overrides, rule):
    assert compose("config", overrides=overrides).rule.name == rule  # Hydra initialised by `composed`
