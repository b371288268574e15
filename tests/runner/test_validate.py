"""Every validation rule fails before any model loads, naming the key, the value and what is allowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException

from dllm_bench.runner.config import CONF_DIR
from dllm_bench.runner.validate import ConfigError, validate_config


@pytest.fixture(scope="module", autouse=True)
def hydra_initialised():
    """One Hydra initialisation for the module (composing is cheap, initialising is not)."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        yield


def compose_config(*overrides: str):
    return compose("config", overrides=list(overrides))


def check(overrides: list[str], *extra: str) -> dict:
    return validate_config(compose_config(*overrides, *extra))


def rejects(overrides: list[str], *extra: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check(overrides, *extra)


def test_defaults_are_valid(llada_overrides):
    c = check(llada_overrides)
    assert c["task"]["name"] == "sudoku" and c["selector"]["name"] == "threshold"


def test_unknown_group_option_lists_choices():
    with pytest.raises(MissingConfigException) as err:
        compose_config("selector=bogus")
    assert "frechet" in str(err.value.options) and "slowfast_paper" in str(err.value.options)


def test_unknown_selector_name_lists_known_names(llada_overrides):
    rejects(llada_overrides, "selector.name=bogus", match=r"selector\.name='bogus'.*'frechet'")


@pytest.mark.parametrize("delta", ["1.0", "-0.1", "1.5"])
def test_delta_outside_unit_interval(llada_overrides, delta):
    rejects(llada_overrides, "selector=frechet", f"selector.delta={delta}", match=r"selector\.delta=.*\[0, 1\)")


def test_delta_zero_allowed(llada_overrides):
    assert check(llada_overrides, "selector=frechet", "selector.delta=0.0")["selector"]["delta"] == 0.0


@pytest.mark.parametrize("tau", ["0.0", "1.01", "-1"])
def test_tau_outside_half_open_interval(llada_overrides, tau):
    rejects(llada_overrides, "selector=threshold", f"selector.tau={tau}", match=r"selector\.tau=.*\(0, 1\]")


def test_tau_one_allowed(llada_overrides):
    check(llada_overrides, "selector.tau=1.0")


@pytest.mark.parametrize("f", ["0", "-0.5"])
def test_factor_not_positive(llada_overrides, f):
    rejects(llada_overrides, "selector=factor", f"selector.f={f}", match=r"selector\.f=.*> 0")


def test_gen_length_not_multiple_of_block(llada_overrides):
    rejects(llada_overrides, "gen_length=24", "block_length=16", match=r"gen_length=24.*multiple of block_length=16")


def test_fixed_steps_not_divisible_by_blocks(llada_overrides):
    rejects(llada_overrides, "selector=topk", "gen_length=24", "block_length=8", "steps=10",
            match=r"steps=10.*divisible by the number of blocks 3")


def test_fixed_step_selector_needs_steps(llada_overrides):
    rejects(llada_overrides, "selector=topk", match=r"steps=None.*'topk' needs a fixed number of steps")


def test_incompatible_selector_and_cache(llada_overrides):
    rejects(llada_overrides, "selector=slowfast_paper", "cache=dual", "compat.slowfast_truncate=true",
            match=r"compat\.slowfast_truncate=True.*slowfast with cache none")


def test_guidance_needs_no_cache(llada_overrides):
    rejects(llada_overrides, "cfg_scale=1.0", "cache=prefix", match=r"cfg_scale=1\.0.*cache=none")


def test_adaptive_selector_rejects_fixed_steps(llada_overrides):
    rejects(llada_overrides, "selector=frechet", "steps=24", match=r"steps=24.*adaptive")


def test_dream_algorithm_has_no_blocks(tiny_dream_dir):
    rejects([f"model.name_or_path={tiny_dream_dir}", "model=tiny_dream", "selector=dream_entropy", "steps=24"],
            match=r"block_length=8.*equal gen_length=24")
    rejects([f"model.name_or_path={tiny_dream_dir}", "model=tiny_dream", "selector=slowfast_dream"],
            match=r"block_length=8.*'slowfast \(variant dream\)'.*equal gen_length=24")


def test_confidence_mask_in_softmax_is_a_boolean(llada_overrides):
    assert check(llada_overrides)["confidence_mask_in_softmax"] is True
    rejects(llada_overrides, "confidence_mask_in_softmax=sometimes", match=r"confidence_mask_in_softmax='sometimes'")


def test_unknown_compat_switch(llada_overrides):
    rejects(llada_overrides, "+compat.magic=true", match=r"compat='magic'.*'factor_rule'")


def test_dream_algorithm_on_llada_model(llada_overrides):
    rejects(llada_overrides, "selector=dream_entropy", "steps=24",
            match=r"model\.flavour='llada'.*'dream' runs on dream")


def test_flavour_must_match_checkpoint(tiny_dream_dir, tmp_path):
    rejects([f"model.name_or_path={tiny_dream_dir}", "model.flavour=llada"],
            match=r"model\.flavour='llada'.*'dream' model")


def test_image_task_on_text_only_model(llada_overrides):
    rejects(llada_overrides, "task=mathvista", match=r"task\.name='mathvista'.*text-only")


def test_unreadable_model_path(tmp_path):
    missing = tmp_path / "no_such_model"
    rejects([f"model.name_or_path={missing}"], match=r"model\.name_or_path=.*no_such_model.*no such directory")


def test_model_dir_without_config(tmp_path):
    rejects([f"model.name_or_path={tmp_path}"], match=r"model\.name_or_path=.*config\.json")


def test_missing_data_file(llada_overrides, tmp_path):
    rejects(llada_overrides, f"task.data_files={tmp_path / 'nope.jsonl'}", match=r"task\.data_files=.*nope\.jsonl")


def test_unknown_task_option_is_named(llada_overrides):
    rejects(llada_overrides, "+task.shots=3", match=r"task='sudoku'.*shots")


def test_bad_count_rule_lists_choices(llada_overrides):
    rejects(llada_overrides, "count_rule=words", match=r"count_rule='words'.*'cut', 'nonstop', 'canvas', 'all'")


def test_hub_id_accepted_without_download(tmp_path):
    c = check(["model=llada_8b_instruct", "gen_length=256", "block_length=32"])
    assert c["model"]["name_or_path"] == "GSAI-ML/LLaDA-8B-Instruct"


def test_config_json_readable_for_flavour(tiny_llada_dir):
    assert json.loads((Path(tiny_llada_dir) / "config.json").read_text())["model_type"] == "llada"
