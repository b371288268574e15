"""Every validation rule fails before any model loads, naming the key, the value and what is allowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException

from dllm_bench.runner.config import CONF_DIR
from dllm_bench.runner.run_config import RunConfig
from dllm_bench.runner.validate import ConfigError, validate_config

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


@pytest.fixture(scope="module", autouse=True)
def hydra_initialised():
    """One Hydra initialisation for the module (composing is cheap, initialising is not)."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        yield


def compose_config(*overrides: str):
    return compose("config", overrides=list(overrides))


def check(overrides: list[str], *extra: str) -> RunConfig:
    return validate_config(compose_config(*overrides, *extra))


def rejects(overrides: list[str], *extra: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check(overrides, *extra)


def test_defaults_are_valid(llada_overrides):
    c = check(llada_overrides)
    assert c.task.name == "sudoku" and c.policy.name == "blocks" and c.rule.name == "threshold"


def test_unknown_group_option_lists_choices():
    with pytest.raises(MissingConfigException) as err:
        compose_config("rule=bogus")
    assert "frechet" in str(err.value.options) and "none" in str(err.value.options)
    with pytest.raises(MissingConfigException) as err:
        compose_config("policy=bogus")
    assert "slowfast_paper" in str(err.value.options) and "dream_threshold" in str(err.value.options)


def test_old_selector_group_is_gone(llada_overrides):
    with pytest.raises(ConfigCompositionException, match="selector"):
        compose_config("selector=frechet")
    rejects(llada_overrides, "+selector=frechet",
            match=r"selector='frechet' is not allowed: unknown key at the top level \(selector is now rule: "
                  r"rule=frechet\)")


def test_unknown_rule_name_lists_known_names(llada_overrides):
    rejects(llada_overrides, "rule.name=bogus", match=r"rule\.name='bogus'.*'frechet'.*'none'")


# ---- strict keys: every group and the top level, including `+key=` appends and keys of another option

@pytest.mark.parametrize("extra, match", [
    (["+selectr=frechet"], r"selectr='frechet' is not allowed: unknown key at the top level; allowed: .*block_length.*rule"),
    (["+steps=24"], r"steps=24 is not allowed: unknown key at the top level"),
    (["+compat.factor_rule=code"], r"compat=\{'factor_rule': 'code'\} is not allowed: unknown key at the top level"),
    (["+model.revision=main"], r"model.revision='main' is not allowed: unknown key in group 'model'; allowed: attention, block_grid, chat, compile, device"),
    (["+task.shots=3"], r"task.shots=3 is not allowed: unknown key for task 'sudoku'; allowed: .*num_fewshot"),
    (["+cache.layer0_always=false"], r"cache.layer0_always=False is not allowed: unknown key for cache 'none'; allowed: name$"),
    (["cache=prefix", "+cache.verify_ratio=0.5"],
     r"cache.verify_ratio=0.5 is not allowed: unknown key for cache 'prefix'; allowed: compat_first_token, name, "
     r"refresh_every"),
    (["cache=dllm", "+cache.refresh_interval=4"], r"cache.refresh_interval=4 is not allowed: unknown key for cache 'dllm'.*layer0_always"),
    (["rule=factor", "+rule.threshold=0.5"], r"rule.threshold=0.5 is not allowed: unknown key for rule 'factor'; allowed: compat, f, name"),
    (["rule=none", "+rule.threshold=0.5"], r"rule.threshold=0.5 is not allowed: unknown key for rule 'none'; allowed: name"),
    (["+policy.threshold=0.5"], r"policy.threshold=0.5 is not allowed: unknown key for policy 'blocks'; allowed: name, steps"),
    (["policy=slowfast_code", "+policy.window=3"], r"policy.window=3 is not allowed: unknown key for policy 'slowfast'.*stability_window"),
])
def test_unknown_key_is_refused_naming_the_allowed_keys(llada_overrides, extra, match):
    rejects(llada_overrides, *extra, match=match)


@pytest.mark.parametrize("value", ["true", "fast", "1"])
def test_compile_takes_false_or_a_mode(llada_overrides, value):
    rejects(llada_overrides, f"model.compile={value}",
            match=r"model\.compile=\S+ is not allowed: (choose one of False, 'default', 'reduce-overhead', 'max-autotune'"
                  r"|true or false or a string is required)")


def test_compile_modes_are_accepted(llada_overrides):
    assert check(llada_overrides).model.compile is False
    assert check(llada_overrides, "model.compile=reduce-overhead").model.compile == "reduce-overhead"


def test_compile_on_the_cpu_needs_a_cpp_compiler(llada_overrides, monkeypatch):
    monkeypatch.setattr("dllm_bench.runner.validate.cpu_compiler_missing", lambda: "no C++ compiler here")
    rejects(llada_overrides, "model.compile=default", "model.device=cpu",
            match=r"model\.compile='default'.*false on this machine \(no C\+\+ compiler here\)")
    assert check(llada_overrides, "model.device=cpu").model.compile is False


@pytest.mark.parametrize("delta", ["1.0", "-0.1", "1.5"])
def test_delta_outside_unit_interval(llada_overrides, delta):
    rejects(llada_overrides, "rule=frechet", f"rule.delta={delta}", match=r"rule=frechet.*delta must be in \[0, 1\)")


def test_delta_zero_allowed(llada_overrides):
    assert check(llada_overrides, "rule=frechet", "rule.delta=0.0").rule.params["delta"] == 0.0


@pytest.mark.parametrize("tau", ["0.0", "1.01", "-1"])
def test_tau_outside_half_open_interval(llada_overrides, tau):
    rejects(llada_overrides, "rule=threshold", f"rule.threshold={tau}", match=r"threshold threshold must be in \(0, 1\]")


def test_tau_one_allowed(llada_overrides):
    check(llada_overrides, "rule.threshold=1.0")


@pytest.mark.parametrize("f", ["0", "-0.5"])
def test_factor_not_positive(llada_overrides, f):
    rejects(llada_overrides, "rule=factor", f"rule.f={f}", match=r"factor f must be > 0")


@pytest.mark.parametrize("extra, match", [
    (["cache=dllm", "cache.prompt_interval=0"], r"cache=dllm: dllm prompt_interval and response_interval must be >= 1"),
    (["cache=dllm", "cache.verify_ratio=1.5"], r"verify_ratio must be in \[0, 1\]"),
    (["cache=prefix", "cache.refresh_every=0"], r"prefix refresh_every must be >= 1 or None"),
    (["rule=topk", "rule.remasking=sideways", "policy.steps=24"], r"topk remasking 'sideways' is not one of"),
    (["policy=slowfast_code", "policy.threshold=2"], r"slowfast threshold must be in \[0, 1\]"),
    (["policy=slowfast_code", "policy.flavour=gpt"], r"slowfast flavour 'gpt' is not one of"),
])
def test_builder_range_checks_are_config_errors(llada_overrides, extra, match):
    rejects(llada_overrides, *extra, match=match)


def test_gen_length_not_multiple_of_block(llada_overrides):
    rejects(llada_overrides, "gen_length=24", "block_length=16", match=r"gen_length 24 is not a multiple of block_length 16")


def test_fixed_steps_not_divisible_by_blocks(llada_overrides):
    rejects(llada_overrides, "rule=topk", "gen_length=24", "block_length=8", "policy.steps=10",
            match=r"steps 10 is not divisible by the number of blocks 3")


def test_fixed_step_rule_needs_steps(llada_overrides):
    rejects(llada_overrides, "rule=topk", match=r"rule 'topk' needs a fixed-step schedule")


def test_truncated_fast_phase_with_a_cache(llada_overrides):
    rejects(llada_overrides, "policy=slowfast_paper", "cache=dual", "policy.truncate_fast=true",
            match=r"truncate_fast .*runs without a cache or with 'dllm', got 'dual'")


def test_guidance_needs_no_cache(llada_overrides):
    rejects(llada_overrides, "cfg_scale=1.0", "cache=prefix", match=r"guidance runs only without a cache, got cache 'prefix'")


def test_adaptive_rule_rejects_fixed_steps(llada_overrides):
    rejects(llada_overrides, "rule=frechet", "policy.steps=24", match=r"rule 'frechet' is adaptive.*steps=None")


def test_dream_policy_has_no_blocks(tiny_dream_dir):
    rejects([f"model.name_or_path={tiny_dream_dir}", "model=tiny_dream", "policy=dream", "policy.alg=entropy",
             "policy.steps=24"], match=r"policy 'dream' has no blocks: block_length 8 must equal gen_length 24")
    rejects([f"model.name_or_path={tiny_dream_dir}", "model=tiny_dream", "policy=slowfast_dream"],
            match=r"slowfast flavour 'dream' has no blocks: block_length 8 must equal gen_length")


def test_dream_policy_needs_steps(tiny_dream_dir):
    rejects([f"model.name_or_path={tiny_dream_dir}", "model=tiny_dream", "policy=dream", "block_length=24"],
            match=r"dream steps must be an integer >= 1")


def test_confidence_mask_in_softmax_is_a_boolean(llada_overrides):
    assert check(llada_overrides).confidence_mask_in_softmax is True
    rejects(llada_overrides, "confidence_mask_in_softmax=sometimes", match=r"confidence_mask_in_softmax='sometimes'")


def test_dream_policy_on_llada_model(llada_overrides):
    rejects(llada_overrides, "policy=dream", "policy.steps=24", "block_length=24",
            match=r"model\.flavour='llada'.*policy 'dream' runs on dream")


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


def test_bad_count_rule_lists_choices(llada_overrides):
    rejects(llada_overrides, "count_rule=words", match=r"count_rule='words'.*'cut', 'nonstop', 'canvas', 'all'")


def test_hub_id_accepted_without_download(tmp_path):
    c = check(["model=llada_8b_instruct", "gen_length=256", "block_length=32"])
    assert c.model.name_or_path == "GSAI-ML/LLaDA-8B-Instruct"


def test_config_json_readable_for_flavour(tiny_llada_dir):
    assert json.loads((Path(tiny_llada_dir) / "config.json").read_text())["model_type"] == "llada"


REFERENCE_CONFIGS = Path(__file__).resolve().parents[2] / "dllm_bench" / "models" / "reference_configs"
# a value each refused key may hold in a config.json, none of them one the network computes
BAD_VALUES = {"rope_scaling": {"type": "linear", "factor": 2.0}, "use_sliding_window": True,
              "tie_word_embeddings": True, "hidden_act": "gelu", "activation_type": "gelu", "alibi": True,
              "rope": False, "attention_layer_norm": True, "clip_qkv": 8.0, "input_emb_norm": True,
              "scale_logits": True, "layer_norm_type": "default", "block_type": "sequential",
              "partial_rotary_factor": 0.5}
MOE_BAD_VALUES = {"rope_scaling": {"type": "yarn", "factor": 4.0}, "partial_rotary_factor": 0.5,
                  "hidden_act": "gelu", "tie_word_embeddings": True, "attention_bias": True, "moe_layer_freq": [1]}


def _config_only(tmp_path: Path, raw: dict, key: str, value) -> Path:
    """A checkpoint directory holding config.json alone (no weights, no tokenizer): a refusal must come first."""
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({**raw, key: value}))
    return directory


# a tied head is computed for a LLaDA-flavoured network (iLLaDA-8B: models/tied.py), refused for Dream's
LLADA_COMPUTES = {"tie_word_embeddings"}


@pytest.mark.parametrize("preset,reference,key", [
    *[("llada_8b_base", "llada-8b-instruct", k) for k in sorted(set(BAD_VALUES) - LLADA_COMPUTES)],
    *[("dream_7b_base", "dream-v0-base-7b", k) for k in sorted(BAD_VALUES)]])
def test_a_dense_config_the_network_does_not_compute_is_refused_before_any_load(tmp_path, preset, reference, key):
    raw = json.loads((REFERENCE_CONFIGS / reference / "config.json").read_text())
    directory = _config_only(tmp_path, raw, key, BAD_VALUES[key])
    rejects([f"model={preset}", f"model.name_or_path={directory}", "gen_length=256", "block_length=32"],
            match=rf"model\.name_or_path=.*ckpt.*{key}=")


@pytest.mark.parametrize("key", sorted(MOE_BAD_VALUES))
def test_a_moe_config_the_network_does_not_compute_is_refused_before_any_load(tmp_path, key):
    from dllm_bench.models.tiny_moe import make_random_moe_checkpoint

    raw = json.loads((make_random_moe_checkpoint(tmp_path / "tiny_moe") / "config.json").read_text())
    directory = _config_only(tmp_path, raw, key, MOE_BAD_VALUES[key])
    rejects(["model=llada_moe_7b_a1b_base", f"model.name_or_path={directory}", "gen_length=256", "block_length=32"],
            match=rf"model\.name_or_path=.*ckpt.*{key}=")

