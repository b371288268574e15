"""A policy added in its own files is covered by every list the suite, the scripts and the docs keep: registered
here at runtime (``decoding.policies.register``, as its own file would) with its conf YAML in a copy of conf/, run
through the registry-driven checks, then removed.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

import pytest
from hydra import compose, initialize_config_dir

import dllm_bench.runner.compose as compose_module
import dllm_bench.runner.config as config_module
from dllm_bench.decoding import config as decoding_config
from dllm_bench.decoding.policies import BlockPolicy
from dllm_bench.lm_eval_adapter import adapter_run_config
from dllm_bench.runner.combinations import Refused, exercises, find_setting, option_name, options
from dllm_bench.runner.components import build_spec
from dllm_bench.runner.compose import compose_run_config
from dllm_bench.runner.errors import ConfigError
from dllm_bench.runner.execute import execute
from dllm_bench.runner.validate import validate_config

POLICY = "test_blocks"


@dataclass(frozen=True)
class RenamedBlockPolicy(BlockPolicy):
    """LLaDA's semi-autoregressive blocks under another name."""

    name: str = field(default=POLICY, init=False)


def register_policy(monkeypatch: pytest.MonkeyPatch, cls: type) -> None:
    """Register a policy class for the test's duration, as its own file's ``@register`` does (removed on undo)."""
    from dllm_bench.decoding.policies import POLICIES, register

    monkeypatch.setitem(POLICIES, cls.name, cls)  # undone when the test ends: the entry goes
    register(cls)  # the decorator accepts the class it already holds under that name


@pytest.fixture()
def added(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(config_module.CONF_DIR, conf)
    (conf / "policy" / f"{POLICY}.yaml").write_text(f"name: {POLICY}\nsteps: null\n")
    monkeypatch.setattr(config_module, "CONF_DIR", conf)
    monkeypatch.setattr(compose_module, "CONF_DIR", conf)
    register_policy(monkeypatch, RenamedBlockPolicy)
    return conf


def test_the_policy_is_an_option_verdicts_come_from_it_and_it_runs(added, tmp_path):
    assert {option_name("policy", o) for o in options("policy")} == set(decoding_config.POLICIES)
    assert find_setting(POLICY, "threshold").steps is None
    with pytest.raises(Refused, match=f"policy '{POLICY}' has no commit rule of its own"):
        find_setting(POLICY, "none")
    with initialize_config_dir(str(added), version_base="1.3"):
        cfg = compose("config", overrides=[f"policy={POLICY}", f"output_dir={tmp_path / 'out'}", "limit=2",
                                           "batch_size=2", "warmup=0", "progress=false", "num_threads=1"])
    row = execute(cfg)
    assert row["n_samples"] == 2 and row["policy.name"] == POLICY


def test_the_errors_the_adapter_the_enumerations_and_the_docs_name_it(added, load_script):
    with pytest.raises(ConfigError, match=f"policy='bogus' is not allowed: choose one of .*{POLICY}"):
        compose_run_config(["policy=bogus"])
    with pytest.raises(ConfigError, match=f"policy.depth=3 is not allowed: unknown key for policy '{POLICY}'"):
        validate_config(compose_run_config([f"policy={POLICY}", "+policy.depth=3"]))
    assert build_spec(adapter_run_config({"policy": POLICY}, "/w")).decoding.policy.name == POLICY
    assert {f"{POLICY}/threshold/none@llada", f"{POLICY}/threshold/none@dream"} <= {e.label for e in exercises()}
    assert f"| `{POLICY}` | LLaDA's semi-autoregressive blocks under another name. |" in \
        load_script("method_tables").render("policies")


def test_nothing_of_it_is_left_after_the_tests_above():
    assert POLICY not in decoding_config.POLICY_CLASSES and POLICY not in decoding_config.POLICIES
    assert POLICY not in options("policy")
