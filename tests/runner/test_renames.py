"""Renamed config keys (runner/renames.py): each old spelling is refused in one line naming its new key, each new
key is a parameter of its option, the docs list every rename, and records written under an old spelling are read
under the new one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from dllm_bench.decoding.config import builder_parameters
from dllm_bench.report.runs import rename_columns
from dllm_bench.runner.config import CONF_DIR, compute_run_id, to_container
from dllm_bench.runner.renames import RENAMED_KEYS, current_names, renamed_flat
from dllm_bench.runner.validate import ConfigError, validate_config

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
KIND = {"rule": "rule", "policy": "policy", "cache": "cache"}


def option_file(group: str, option: str) -> str:
    """A conf/<group> file that selects `option` (its own name first)."""
    if (CONF_DIR / group / f"{option}.yaml").is_file():
        return option
    return next(p.stem for p in sorted((CONF_DIR / group).glob("*.yaml")) if f"name: {option}\n" in p.read_text())


@pytest.mark.parametrize("renamed", RENAMED_KEYS, ids=lambda r: f"{r.group}.{r.option}.{r.old}")
def test_an_old_spelling_is_refused_naming_the_new_key(renamed):
    overrides = [f"{renamed.group}={option_file(renamed.group, renamed.option)}", f"+{renamed.group}.{renamed.old}=0.5"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    line = str(err.value)
    assert line.startswith(f"{renamed.group}.{renamed.old} was renamed {renamed.group}.{renamed.new} ")
    assert line.endswith(f"use {renamed.group}.{renamed.new}=0.5") and "\n" not in line


@pytest.mark.parametrize("renamed", RENAMED_KEYS, ids=lambda r: f"{r.group}.{r.option}.{r.old}")
def test_the_new_key_is_a_parameter_of_its_option_and_the_old_one_is_not(renamed):
    params = builder_parameters(KIND[renamed.group], renamed.option)
    assert renamed.new in params and (renamed.old not in params or renamed.old == renamed.new)


def test_the_command_line_refuses_an_old_spelling_in_one_line_with_exit_2():
    done = subprocess.run([sys.executable, "-m", "dllm_bench.run", "rule.tau=0.8"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "dllm-bench: config error: rule.tau was renamed rule.threshold (rule 'threshold': a confidence (probability) "
        "a candidate must reach): use rule.threshold=0.8"]


def test_the_docs_list_every_rename():
    text = (ROOT / "docs" / "runner.md").read_text()
    for r in RENAMED_KEYS:
        assert f"| `{r.group}.{r.old}` | {r.group} `{r.option}` | `{r.group}.{r.new}` |" in text


def test_runs_csv_rows_of_old_spellings_read_under_the_new_ones():
    runs = pd.DataFrame({"rule.name": ["threshold", "entropy_threshold", "hierarchy", "threshold"],
                         "rule.tau": ["0.9", "", "", ""], "rule.threshold": ["", "0.5", "0.8", "0.7"]})
    got = rename_columns(runs)
    assert list(got["rule.threshold"]) == ["0.9", "", "0.8", "0.7"]  # hierarchy's and a new row's own value kept
    assert list(got["rule.max_entropy"]) == ["", "0.5", "", ""]
    assert list(got["rule.tau"]) == ["", "", "", ""]
    numeric = rename_columns(pd.DataFrame({"cache.name": ["elastic", "dual"], "cache.gamma": [0.9, float("nan")]}))
    assert numeric["cache.min_cosine"].iloc[0] == 0.9 and numeric["cache.gamma"].isna().all()


def test_recorded_settings_take_the_new_names():
    assert current_names("rule", "klass", {"conf_threshold": 0.6, "variant": "dream", "kl_threshold": 0.01}) == {
        "threshold": 0.6, "flavour": "dream", "kl_threshold": 0.01}
    assert current_names("rule", "credit", {"gamma": 0.2}) == {"gamma": 0.2}  # credit's gamma was never renamed
    assert renamed_flat({"policy.name": "dpad", "policy.sigma": "4.0"}) == {"policy.name": "dpad", "policy.max_sd": "4.0"}


@pytest.mark.parametrize("renamed", RENAMED_KEYS, ids=lambda r: f"{r.group}.{r.option}.{r.old}")
def test_a_renamed_key_keeps_the_run_id_of_its_first_spelling(renamed):
    choice = option_file(renamed.group, renamed.option)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        data = to_container(compose("config", overrides=[f"{renamed.group}={choice}"]))
    node = data[renamed.group]
    first = {**data, renamed.group: {(renamed.old if k == renamed.new else k): v for k, v in node.items()}}
    assert renamed.new in node and compute_run_id(data) == compute_run_id(first)
    changed = {**data, renamed.group: {**node, renamed.new: "another"}}
    assert compute_run_id(changed) != compute_run_id(data)
