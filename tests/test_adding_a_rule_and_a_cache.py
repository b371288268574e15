"""A rule and a cache added in their own files only are covered by every list the suite, the scripts and the docs
keep: registered here at runtime, each with its conf YAML in a copy of conf/, run through the registry-driven
checks (the runner's options, policy x rule verdicts and one-line errors, the lm-eval adapter's options, the sync
count's and the bf16 tier's enumerations, the docs' method tables), then removed."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from hydra import compose, initialize_config_dir

import dllm_bench.runner.compose as compose_module
import dllm_bench.runner.config as config_module
from dllm_bench.decoding.caches import CACHES
from dllm_bench.decoding.caches.none import NoCache
from dllm_bench.decoding.rules import RULES, RuleBase, StepContext
from dllm_bench.lm_eval_adapter import adapter_run_config
from dllm_bench.runner.combinations import Refused, exercises, find_setting, first_rule, option_name, options
from dllm_bench.runner.components import NO_RULE, build_spec
from dllm_bench.runner.compose import compose_run_config
from dllm_bench.runner.errors import ConfigError
from dllm_bench.runner.execute import execute
from dllm_bench.runner.validate import validate_config

RULE, CACHE = "test_most_confident", "test_full_forward"


@dataclass(frozen=True)
class MostConfidentRule(RuleBase):
    """Commit each row's most confident candidate: one token per step."""

    name: ClassVar[str] = RULE

    def commit(self, ctx: StepContext) -> torch.Tensor:
        best = ctx.confidence.argmax(-1, keepdim=True)
        return torch.zeros_like(ctx.candidates).scatter_(1, best, True) & ctx.candidates


@dataclass(frozen=True)
class FullForwardCache(NoCache):
    """No storage: every step a full forward (the none cache under another name)."""

    name: ClassVar[str] = CACHE


@pytest.fixture()
def added(tmp_path, monkeypatch):
    """The rule and the cache registered, conf/ copied with their YAML files and pointed at; all undone after."""
    conf = tmp_path / "conf"
    shutil.copytree(config_module.CONF_DIR, conf)
    (conf / "rule" / f"{RULE}.yaml").write_text(f"name: {RULE}\n")
    (conf / "cache" / f"{CACHE}.yaml").write_text(f"name: {CACHE}\n")
    monkeypatch.setattr(config_module, "CONF_DIR", conf)
    monkeypatch.setattr(compose_module, "CONF_DIR", conf)
    RULES.register(MostConfidentRule)
    CACHES.register(FullForwardCache)
    try:
        yield conf
    finally:
        RULES.pop(RULE)
        CACHES.pop(CACHE)
    assert RULE not in RULES and CACHE not in CACHES


def run_config(conf, tmp_path, *overrides: str):
    with initialize_config_dir(str(conf), version_base="1.3"):
        return compose("config", overrides=[*overrides, f"output_dir={tmp_path / 'out'}", "limit=2", "batch_size=2",
                                            "warmup=0", "progress=false", "num_threads=1"])


def test_the_options_name_the_registered_methods(added):
    assert RULE in options("rule") and CACHE in options("cache")
    assert {option_name("rule", o) for o in options("rule")} == {*RULES, NO_RULE}
    assert {option_name("cache", o) for o in options("cache")} == set(CACHES)


def test_the_runner_agrees_with_the_derived_verdict_of_every_policy_with_the_rule(added, tmp_path):
    verdicts = {}
    for policy in options("policy"):
        try:
            setting, reason = find_setting(policy, RULE), None
        except Refused as err:
            setting, reason = err.setting, str(err)
        verdicts[policy] = reason
        cfg = run_config(added, tmp_path, *setting.overrides(), f"model=tiny_{(setting.flavours or ('llada',))[0]}")
        if reason is None:
            assert validate_config(cfg).rule.name == RULE
        else:
            with pytest.raises(ConfigError, match="^policy="):
                validate_config(cfg)
    assert verdicts["blocks"] is None and "own commit rule" in verdicts["wino"]  # a plain adaptive rule
    row = execute(run_config(added, tmp_path, f"rule={RULE}", f"cache={CACHE}"))
    assert row["n_samples"] == 2 and row["rule.name"] == RULE and row["cache.name"] == CACHE


def test_the_one_line_errors_list_them(added):
    for group, name in (("rule", RULE), ("cache", CACHE)):
        with pytest.raises(ConfigError, match=f"{group}='bogus' is not allowed: choose one of .*{name}"):
            compose_run_config([f"{group}=bogus"])
    with pytest.raises(ConfigError, match=f"rule.depth=3 is not allowed: unknown key for rule '{RULE}'; allowed: name"):
        validate_config(compose_run_config([f"rule={RULE}", "+rule.depth=3"]))


def test_the_lm_eval_adapter_reaches_them(added):
    spec = build_spec(adapter_run_config({"rule": RULE, "cache": CACHE}, "/w"))
    assert spec.decoding.rule.name == RULE and spec.decoding.cache.name == CACHE
    assert first_rule("blocks", CACHE) is not None


def test_the_sync_count_and_the_bf16_tier_exercise_them(added, load_script):
    labels = {e.label for e in exercises()}
    assert f"blocks/{RULE}/none@llada" in labels and f"blocks/threshold/{CACHE}@llada" in labels
    assert f"blocks/threshold/{CACHE}@dream" in labels  # the cache declares both flavours (CacheBase's default)
    counting = load_script("count_syncs")
    setting = counting.settings(24, 8)[f"blocks/{RULE}/none@llada"]
    assert counting.budget(setting) == 3  # RuleBase's declared default


def test_the_docs_method_tables_row_every_registered_method(added, load_script, tmp_path):
    tables = load_script("method_tables")
    for kind in ("rules", "caches", "policies", "tasks"):
        rendered = tables.render(kind)
        assert all(f"| `{name}` |" in rendered for name in tables.registry(kind)), kind
    assert "| `test_most_confident` | Commit each row's most confident candidate: one token per step. |" in \
        tables.render("rules")
    assert f"`{RULE}`" in tables.render("policy-rule").split("| `blocks` |")[1].split("\n")[0]  # blocks runs it
    doc = tmp_path / "doc.md"
    doc.write_text("x\n<!-- method-table:caches -->\nSTALE ROW\n<!-- /method-table:caches -->\ny\n")
    assert tables.main(["--check", str(doc)]) == 1 and "STALE ROW" in doc.read_text()  # stale: listed, not rewritten
    assert tables.main([str(doc)]) == 0 and f"`{CACHE}`" in doc.read_text() and "STALE ROW" not in doc.read_text()
    assert tables.main(["--check", str(doc)]) == 0
