"""The real 8B/7B architectures built on the meta device match the published tensor sets, name for name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import dllm_bench.models
from dllm_bench.models import load_model

REF = Path(dllm_bench.models.__file__).parent / "reference_configs"


def _meta(tmp_path: Path, config_src: Path) -> object:
    d = tmp_path / config_src.parent.name
    d.mkdir()
    shutil.copy(config_src, d / "config.json")
    return load_model(d, device="meta")


def _shapes(model: object) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _reference_index() -> set[str]:
    return set(json.loads((REF / "llada-v-language-model" / "model.safetensors.index.json").read_text())["weight_map"])


def test_llada_8b_instruct_olmo_names_match_reference_tensor_set(tmp_path: Path) -> None:
    model = _meta(tmp_path, REF / "llada-8b-instruct" / "config.json")
    shapes = _shapes(model)
    n = model.num_parameters()
    print(f"LLaDA-8B-Instruct parameters: {n:,} ({n / 1e9:.2f} B)")
    assert len(shapes) == 291
    assert 7.9e9 < n < 8.1e9
    # original names are one-to-one with the LLaMA-style index of the same language model
    rename = {
        "model.transformer.wte.weight": "model.embed_tokens.weight",
        "model.transformer.ln_f.weight": "model.norm.weight",
        "model.transformer.ff_out.weight": "lm_head.weight",
    }
    per_layer = {
        "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
        "attn_out": "self_attn.o_proj", "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
        "ff_out": "mlp.down_proj", "attn_norm": "input_layernorm", "ff_norm": "post_attention_layernorm",
    }
    mapped = set()
    for name in shapes:
        if name in rename:
            mapped.add(rename[name])
        else:
            _, _, _, i, part, w = name.split(".")
            mapped.add(f"model.layers.{i}.{per_layer[part]}.{w}")
    assert mapped == _reference_index()
    assert shapes["model.transformer.wte.weight"] == (126464, 4096)
    assert shapes["model.transformer.blocks.0.ff_proj.weight"] == (12288, 4096)
    assert shapes["model.transformer.blocks.31.attn_out.weight"] == (4096, 4096)
    assert model.config.mask_token_id == 126336 and model.config.is_instruct


def test_llada_v_language_model_llama_names_equal_reference_index(tmp_path: Path) -> None:
    model = _meta(tmp_path, REF / "llada-v-language-model" / "config.json")
    shapes = _shapes(model)
    assert set(shapes) == _reference_index()
    total_bytes = sum(2 * a * (b if len(s) > 1 else 1) for s in shapes.values() for a, b in [(s[0], s[-1])])
    index = json.loads((REF / "llada-v-language-model" / "model.safetensors.index.json").read_text())
    assert total_bytes == index["metadata"]["total_size"]  # bf16 bytes of exactly these shapes


def test_dream_7b_qwen2_names_gqa_and_biases(tmp_path: Path) -> None:
    model = _meta(tmp_path, REF / "dream-v0-base-7b" / "config.json")
    shapes = _shapes(model)
    n = model.num_parameters()
    print(f"Dream-v0-7B parameters: {n:,} ({n / 1e9:.2f} B)")
    expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for i in range(28):
        p = f"model.layers.{i}."
        expected |= {p + f"self_attn.{x}_proj.{w}" for x in "qkv" for w in ("weight", "bias")}
        expected |= {p + "self_attn.o_proj.weight", p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
        expected |= {p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
    assert set(shapes) == expected
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (512, 3584)  # 4 KV heads x 128
    assert shapes["model.layers.0.self_attn.q_proj.bias"] == (3584,)
    assert shapes["lm_head.weight"] == (152064, 3584)
    assert 7.5e9 < n < 7.7e9
    assert model.config.shift_logits and model.config.n_kv_heads == 4


def test_unknown_model_type_is_named(tmp_path: Path) -> None:
    d = tmp_path / "bad"
    d.mkdir()
    cfg = json.loads((REF / "llada-8b-instruct" / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"model_type 'gpt2'.*allowed"):
        load_model(d, device="meta")
