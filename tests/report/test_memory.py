"""The memory estimate's shapes: the parameter count from a config equals the network's own (built on the meta
device), every model with a shape of its own is estimated at it, and the block-diffusion policy's committed K/V count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from dllm_bench.models.architectures import architecture_of
from dllm_bench.models.config import ModelConfig
from dllm_bench.models.network import DiffusionLM
from dllm_bench.report.memory import (
    MODEL_SHAPES,
    SHAPE_CONFIGS,
    GiB,
    decode_memory,
    model_shape,
    parameters,
    shape_config,
)

PRESETS = Path(__file__).parents[2] / "conf" / "model"


@pytest.mark.parametrize("shape", sorted(SHAPE_CONFIGS))
def test_parameters_equal_the_networks_own_count(shape):
    # the real widths with the fewest layers that hold every kind (LLaDA2: its dense first layer and one MoE layer)
    raw = json.loads(SHAPE_CONFIGS[shape].read_text())
    raw["num_hidden_layers" if "num_hidden_layers" in raw else "n_layers"] = int(raw.get("first_k_dense_replace") or 0) + 1
    arch = architecture_of(raw)
    cfg = arch.parse(raw, shape) if arch is not None else ModelConfig.from_hf_config(raw, name_or_path=shape)
    with torch.device("meta"):
        net = (arch.network if arch is not None else DiffusionLM)(cfg)
    assert parameters(cfg) == sum(p.numel() for p in net.parameters())


def test_every_model_with_a_shape_of_its_own_is_a_preset_of_that_flavour():
    presets = [yaml.safe_load(p.read_text()) for p in sorted(PRESETS.glob("*.yaml"))]
    by_name = {p["name_or_path"]: p for p in presets}
    assert set(MODEL_SHAPES) <= set(by_name)  # no entry outlives its preset
    for name, shape in MODEL_SHAPES.items():
        assert model_shape(by_name[name]) == shape
        assert shape_config(shape).flavour == by_name[name]["flavour"], name
    assert model_shape({"name_or_path": "some/dream-finetune", "flavour": "dream"}) == "dream-7b"


def test_committed_blocks_of_the_block_diffusion_policy_are_counted_as_k_and_v():
    cfg = shape_config("llada2-mini")
    config = {"gen_length": 256, "block_length": 32, "cache": {"name": "none"}, "rule": None,
              "policy": {"name": "block_diffusion", "kv_cache": "none"}}
    recompute = decode_memory(cfg, config, 4, 1024)
    committed = decode_memory(cfg, {**config, "policy": {"name": "block_diffusion", "kv_cache": "committed"}}, 4, 1024)
    assert recompute.cache == 0
    assert committed.cache == pytest.approx(2 * cfg.n_layers * 4 * (1024 + 256) * cfg.n_kv_heads * cfg.head_dim * 2 / GiB)
    assert committed.weights == recompute.weights == pytest.approx(parameters(cfg) * 2 / GiB)
