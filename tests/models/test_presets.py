"""Model presets: each hub model has its preset documented in docs/models.md, and its flavour is the one
its network's config parser gives (LLaDA-MoE parses to the LLaDA flavour: no logit shift)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dllm_bench.models.moe import MoEConfig

ROOT = Path(__file__).parents[2]
PRESETS = sorted((ROOT / "conf" / "model").glob("*.yaml"))
HUB = [p for p in PRESETS if "${" not in yaml.safe_load(p.read_text())["name_or_path"]]


@pytest.mark.parametrize("path", HUB, ids=[p.stem for p in HUB])
def test_every_hub_preset_is_in_the_models_doc_with_its_sources(path):
    doc = (ROOT / "docs" / "models.md").read_text()
    preset = yaml.safe_load(path.read_text())
    assert preset["name_or_path"] in doc
    assert f"`{path.stem}`" in doc
    if path.stem not in ("llada_8b_instruct", "llada_8b_base", "dream_7b_instruct", "dream_7b_base", "llada_v"):
        assert "Unverified here" in path.read_text()  # each new preset says what could not be checked


def test_llada_moe_presets_use_the_flavour_its_config_parses_to():
    cfg = MoEConfig.from_hf_config({
        "architectures": ["LLaDAMoEModelLM"], "model_type": "llada", "vocab_size": 16, "hidden_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_experts": 2, "num_experts_per_tok": 1,
        "expert_intermediate_size": 4, "moe_layer_freq": [1], "rope_theta": 1.0, "rms_norm_eps": 1e-6,
        "eos_token_id": 3})
    for path in PRESETS:
        if path.stem.startswith("llada_moe"):
            assert yaml.safe_load(path.read_text())["flavour"] == cfg.flavour
    assert not cfg.shift_logits and cfg.mask_token_id == 156895


def test_llada_1_5_goes_through_the_chat_template_although_its_name_has_no_instruct():
    assert yaml.safe_load((ROOT / "conf" / "model" / "llada_1_5.yaml").read_text())["chat"] is True
