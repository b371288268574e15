"""lm-eval model_args speak the runner's keys: composed from conf/ and checked as `dllm-bench` checks them."""

from __future__ import annotations

from pathlib import Path

import pytest
from lm_eval.utils import simple_parse_args_string

from dllm_bench.decoding.config import DLLMCache, FrechetRule, SlowFastPolicy
from dllm_bench.lm_eval_adapter import OLD_NAMES, adapter_run_config
from dllm_bench.runner.combinations import Refused, find_setting, first_rule, option_name, options
from dllm_bench.runner.components import build_spec
from dllm_bench.runner.validate import ConfigError

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


def spec_of(model_args: str):
    args = simple_parse_args_string(model_args)
    pretrained = args.pop("pretrained", None)
    return build_spec(adapter_run_config(args, pretrained))


def test_the_runner_keys_build_the_runners_spec():
    spec = spec_of("pretrained=/w,rule=frechet,rule.delta=0.2,cache=dllm,cache.prompt_interval=100,"
                   "policy=slowfast_code,gen_length=64,block_length=64")
    d = spec.decoding
    assert isinstance(d.rule, FrechetRule) and d.rule.delta == 0.2
    assert isinstance(d.cache, DLLMCache) and d.cache.prompt_interval == 100
    assert isinstance(d.policy, SlowFastPolicy) and d.policy.explore_steps == 6
    assert (d.gen_length, d.block_length, d.early_stop) == (64, 64, False)


def reachable_setting(group: str, option: str):
    """A setting that runs ``option`` of ``group``, asked of the methods (runner.combinations), policy blocks first."""
    policies = sorted(options("policy"), key=lambda p: p != "blocks")
    if group == "policy":
        return first_rule(option)
    if group == "rule":
        return next((s for p in policies if (s := _setting(p, option)) is not None), None)
    return next((s for p in policies if (s := first_rule(p, option)) is not None), None)


def _setting(policy: str, rule: str):
    try:
        return find_setting(policy, rule)
    except Refused:
        return None


@pytest.mark.parametrize("group", ["policy", "rule", "cache"])
def test_every_option_of_every_group_is_reachable(group):
    for option in options(group):
        setting = reachable_setting(group, option)
        assert setting is not None, f"{group}={option} runs with no policy, rule and cache option"
        spec = spec_of(",".join(["pretrained=/w", *setting.overrides()]))
        built = getattr(spec.decoding, group)
        assert (built.name if built is not None else "none") == option_name(group, option)


@pytest.mark.parametrize(("model_args", "message"), [
    ("selector=frechet", "selector='frechet' is not allowed: model_args use the runner's keys: rule=frechet"),
    ("delta=0.5", "delta=0.5 is not allowed: model_args use the runner's keys: rule.delta=0.5"),
    ("refresh_every=4", "refresh_every=4 is not allowed: model_args use the runner's keys: cache.refresh_every=4"),
    ("rule=frechet,rule.detla=0.2", "rule.detla=0.2 is not allowed: unknown key for rule 'frechet'; allowed: delta, name"),
    ("rule=frechet,rule.delta=high", "rule.delta='high' is not allowed: a number is required"),
    ("rule=frechet,rule.delta=1.5", "frechet delta must be in [0, 1), got 1.5"),
    ("cache=dllm,refresh_interval=4", "refresh_interval=4 is not allowed: unknown key at the top level"),
    ("cache=nope", f"cache='nope' is not allowed: choose one of {', '.join(options('cache'))} (files in conf/cache/)"),
    ("limit=5", "limit=5 is not allowed: lm-eval's own options choose the documents"),
    ("tracking=mlflow", "tracking='mlflow' is not allowed: under lm-eval, log with lm-eval's own trackers"),
    ("model=GSAI-ML/LLaDA-8B-Instruct", "the checkpoint itself goes in pretrained="),
])
def test_bad_model_args_are_one_line(model_args, message):
    with pytest.raises(ConfigError) as err:
        spec_of("pretrained=/w," + model_args)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_old_name_has_a_hint():
    for old, new in OLD_NAMES.items():
        with pytest.raises(ConfigError, match=f"{old}=.*is not allowed: model_args use the runner's keys: {new}="):
            adapter_run_config({old: 1}, "/w")


def test_a_model_preset_gives_its_checkpoint_and_settings():
    run = adapter_run_config({"model": "tiny_llada"}, None)
    assert Path(run.model.name_or_path).name == "tiny_llada" and run.model.chat is True
    assert adapter_run_config({"model": "tiny_llada"}, "/mine").model.name_or_path == "/mine"
