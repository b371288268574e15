"""Fast-dLLM v2, SDAR and LLaDA2 built on the meta device from their real config.json files, tensor for tensor
against the real checkpoints' tensor lists (the safetensors index where one is stored, else the published modeling
file's module names with shapes from the config); dispatch by ``architectures``; the tiny checkpoints of each
format load through the same path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import dllm_bench.models
from dllm_bench.models import load_model
from dllm_bench.models.architectures import architecture_of, known_architectures
from dllm_bench.models.config import ModelConfigError
from dllm_bench.models.llada2 import LLaDA2DiffusionLM, llada2_canonical_name, llada2_checkpoint_name
from dllm_bench.models.moe import MoEDiffusionLM
from dllm_bench.models.qwen import QwenDiffusionLM
from dllm_bench.models.tiny_blocks import FORMATS, make_random_block_checkpoint

REF = Path(dllm_bench.models.__file__).parent / "reference_configs"


def _meta(tmp_path: Path, name: str, **override) -> torch.nn.Module:
    d = tmp_path / name
    d.mkdir()
    raw = {**json.loads((REF / name / "config.json").read_text()), **override}
    (d / "config.json").write_text(json.dumps(raw))
    return load_model(d, device="meta")


def _shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _index(name: str) -> dict:
    return json.loads((REF / name / "model.safetensors.index.json").read_text())


def _bf16_bytes(shapes: dict[str, tuple[int, ...]]) -> int:
    return sum(2 * torch.Size(s).numel() for s in shapes.values())


# ---------------------------------------------------------------- Fast-dLLM v2


def test_fast_dllm_v2_7b_equals_its_safetensors_index(tmp_path):
    model = _meta(tmp_path, "fast-dllm-v2-7b")
    shapes, index = _shapes(model), _index("fast-dllm-v2-7b")
    assert isinstance(model, QwenDiffusionLM)
    assert set(shapes) == set(index["weight_map"])  # 339 tensors, name for name
    assert _bf16_bytes(shapes) == index["metadata"]["total_size"]  # and shape for shape (bf16 bytes)
    cfg = model.config
    assert (cfg.attention, cfg.block_size, cfg.block_grid, cfg.shift_logits) == ("block_causal", 32, "absolute", True)
    assert cfg.mask_token_id == 151665 and cfg.qkv_bias and not cfg.tie_embeddings
    n = model.num_parameters()
    print(f"Fast-dLLM v2 7B parameters: {n:,}")
    assert n == index["metadata"]["total_size"] // 2


def test_fast_dllm_v2_1_5b_ties_its_head(tmp_path):
    """Qwen2.5-1.5B-Instruct's shape (a reconstructed config: reference_configs/README.md): the LM head is the
    embedding, so the checkpoint stores no lm_head.weight."""
    model = _meta(tmp_path, "fast-dllm-v2-1.5b")
    shapes = _shapes(model)
    want = {k for k in _index("fast-dllm-v2-7b")["weight_map"] if k != "lm_head.weight"}
    assert set(shapes) == want
    assert shapes["model.embed_tokens.weight"] == (151936, 1536)
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (256, 1536)  # 2 KV heads x 128
    assert model.lm_head.weight is model.embed.weight
    n = model.num_parameters()
    print(f"Fast-dLLM v2 1.5B parameters: {n:,}")
    assert 1.50e9 < n < 1.56e9  # Qwen2.5-1.5B: 1.54B


# ---------------------------------------------------------------- SDAR


@pytest.mark.parametrize("name", ["sdar-4b-chat", "sdar-8b-chat"])
def test_sdar_equals_its_safetensors_index(tmp_path, name):
    model = _meta(tmp_path, name)
    shapes, index = _shapes(model), _index(name)
    assert set(shapes) == set(index["weight_map"])
    assert _bf16_bytes(shapes) == index["metadata"]["total_size"]
    cfg = model.config
    assert (cfg.attention, cfg.block_size, cfg.shift_logits, cfg.mask_token_id) == ("block_causal", 4, False, 151669)
    assert shapes["model.layers.0.self_attn.q_norm.weight"] == (128,)
    print(f"{name} parameters: {model.num_parameters():,}")


def _qwen3_names(cfg: dict) -> dict[str, tuple[int, ...]]:
    """The Qwen3 module tree of the published SDAR file, shapes from the config (independent of the network)."""
    d, hd, h, kv, ff = cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"], \
        cfg["intermediate_size"]
    out = {"model.embed_tokens.weight": (cfg["vocab_size"], d), "model.norm.weight": (d,),
           "lm_head.weight": (cfg["vocab_size"], d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                p + "self_attn.q_proj.weight": (h * hd, d), p + "self_attn.k_proj.weight": (kv * hd, d),
                p + "self_attn.v_proj.weight": (kv * hd, d), p + "self_attn.o_proj.weight": (d, h * hd),
                p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d), p + "mlp.down_proj.weight": (d, ff)}
    return out


@pytest.mark.parametrize("name", ["sdar-1.7b-chat", "sdar-4b-chat", "sdar-8b-chat"])
def test_sdar_equals_the_published_module_tree(tmp_path, name):
    """1.7B has no stored index: the module tree with the config's shapes (checked against the 4B/8B indexes)."""
    want = _qwen3_names(json.loads((REF / name / "config.json").read_text()))
    assert _shapes(_meta(tmp_path, name)) == want


# ---------------------------------------------------------------- LLaDA2


def _llada2_names(cfg: dict) -> dict[str, tuple[int, ...]]:
    """The published LLaDA2MoeModelLM module tree (modeling_llada2_moe.py) with shapes from the config."""
    d, hd, h, kv = cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    moe, e = cfg["moe_intermediate_size"], cfg["num_experts"]
    out = {"model.word_embeddings.weight": (cfg["vocab_size"], d), "model.norm.weight": (d,),
           "lm_head.weight": (cfg["vocab_size"], d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                p + "attention.query_key_value.weight": ((h + 2 * kv) * hd, d),
                p + "attention.query_layernorm.weight": (hd,), p + "attention.key_layernorm.weight": (hd,),
                p + "attention.dense.weight": (d, h * hd)}
        if i < cfg["first_k_dense_replace"]:
            ff = cfg["intermediate_size"]
            out |= {p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d),
                    p + "mlp.down_proj.weight": (d, ff)}
            continue
        out |= {p + "mlp.gate.weight": (e, d), p + "mlp.gate.expert_bias": (e,)}
        for j in range(e):
            out |= {p + f"mlp.experts.{j}.gate_proj.weight": (moe, d), p + f"mlp.experts.{j}.up_proj.weight": (moe, d),
                    p + f"mlp.experts.{j}.down_proj.weight": (d, moe)}
        sh = moe * cfg["num_shared_experts"]
        out |= {p + "mlp.shared_experts.gate_proj.weight": (sh, d), p + "mlp.shared_experts.up_proj.weight": (sh, d),
                p + "mlp.shared_experts.down_proj.weight": (d, sh)}
    return out


@pytest.mark.parametrize("name,layers,total", [("llada2-mini", 20, (16.0e9, 16.5e9)), ("llada2-flash", 32, (100e9, 105e9))])
def test_llada2_equals_the_published_module_tree(tmp_path, name, layers, total):
    raw = json.loads((REF / name / "config.json").read_text())
    model = _meta(tmp_path, name, model_type="llada2_moe")  # the HF checkpoints' string (this copy: a training one)
    shapes = _shapes(model)
    assert isinstance(model, LLaDA2DiffusionLM)
    assert shapes == _llada2_names(raw)
    cfg = model.config
    assert cfg.n_layers == layers and cfg.rotary_dim == 64 and cfg.mask_token_id == 156895
    assert (cfg.attention, cfg.block_size, cfg.shift_logits) == ("block_causal", 32, False)
    n = model.num_parameters()
    active = n - (cfg.n_layers - cfg.first_k_dense_replace) * (cfg.num_experts - cfg.num_experts_per_tok) * \
        3 * cfg.d_model * cfg.moe_intermediate_size
    print(f"{name}: {n:,} parameters, {active:,} active per token; bf16 weights {_bf16_bytes(shapes) / 2**30:.1f} GiB")
    assert total[0] < n < total[1]


def test_llada2_names_round_trip():
    for name in ("model.layers.3.mlp.gate.expert_bias", "model.layers.3.mlp.gate_proj.weight",
                 "model.layers.3.mlp.experts.7.down_proj.weight", "model.layers.0.attention.query_key_value.weight",
                 "model.word_embeddings.weight"):
        assert llada2_checkpoint_name(llada2_canonical_name(name)) == name


@pytest.mark.parametrize("key,value", [("use_qkv_bias", True), ("score_function", "softmax"), ("n_group", 7),
                                       ("tie_word_embeddings", True), ("rope_scaling", {"type": "yarn"})])
def test_llada2_refuses_what_it_does_not_compute(tmp_path, key, value):
    with pytest.raises(ModelConfigError) as err:
        _meta(tmp_path, "llada2-mini", **{key: value})
    assert key in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------- dispatch and the tiny formats


def test_dispatch_is_on_architectures_not_model_type(tmp_path):
    assert set(known_architectures()) == {"Fast_dLLM_QwenForCausalLM", "SDARForCausalLM", "LLaDA2MoeModelLM"}
    raw = json.loads((REF / "fast-dllm-v2-7b" / "config.json").read_text())
    assert architecture_of({**raw, "model_type": "anything"}).name == "fast_dllm_v2"
    assert architecture_of({**raw, "architectures": ["Qwen2ForCausalLM"]}) is None
    # LLaDA-MoE shares LLaDA's model_type "llada": its architectures pick the MoE network
    moe = {"architectures": ["LLaDAMoEModelLM"], "model_type": "llada", "vocab_size": 64, "hidden_size": 32,
           "num_hidden_layers": 1, "num_attention_heads": 4, "num_experts": 4, "num_experts_per_tok": 2,
           "expert_intermediate_size": 8, "moe_layer_freq": [1], "rope_theta": 5e4, "rms_norm_eps": 1e-6,
           "eos_token_id": 1}
    (tmp_path / "config.json").write_text(json.dumps(moe))
    assert isinstance(load_model(tmp_path, device="meta"), MoEDiffusionLM)


@pytest.mark.parametrize("fmt", FORMATS)
def test_tiny_checkpoints_round_trip_through_load_model(tmp_path, fmt):
    directory = make_random_block_checkpoint(tmp_path / fmt, fmt, seed=0)
    model = load_model(directory, device="cpu")
    again = load_model(directory, device="cpu")
    assert model.config.attention == "block_causal" and model.config.block_size == 4
    assert model.tokenizer.convert_tokens_to_ids(model.tokenizer.mask_token) == model.config.mask_token_id
    assert model.config.eot_token_id is not None
    ids = torch.randint(0, 90, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(ids), again(ids))
    shutil.rmtree(directory)


def test_a_tied_tiny_checkpoint_stores_no_head(tmp_path):
    from safetensors import safe_open

    directory = make_random_block_checkpoint(tmp_path / "tied", "fast_dllm_v2", tie_word_embeddings=True)
    with safe_open(str(directory / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in f.keys()
    model = load_model(directory, device="cpu")
    assert model.lm_head.weight.data_ptr() == model.embed.weight.data_ptr()


def test_illada_8b_from_its_model_card(tmp_path):
    """iLLaDA-8B's hub config was not found: a LLaMA-style LLaDA config with the model card's architecture table
    (32 layers, 4096, 32 / 8 heads, FFN 14,336, vocab 155,136, tied embeddings) builds 7.62B parameters, 6.98B of
    them outside the embedding, as the card says; the mask id is 5 (ML-GSAI/LLaDA's README)."""
    cfg = {"architectures": ["LLaDAModelLM"], "model_type": "llada", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 155136,
           "tie_word_embeddings": True, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "eos_token_id": 1}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model = load_model(tmp_path, device="meta")
    n, embedding = model.num_parameters(), model.embed.weight.numel()
    assert round(n / 1e9, 2) == 7.62 and round((n - embedding) / 1e9, 2) == 6.98
    assert "lm_head.weight" not in model.state_dict() and model.lm_head.weight is model.embed.weight
    assert model.config.mask_token_id == 5 and model.config.attention == "full"
    assert model.state_dict()["model.layers.0.self_attn.k_proj.weight"].shape == (1024, 4096)
