"""load_model on real-format tiny checkpoints: round trips, shards, the chat template, and precise errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import dllm_bench.models
from dllm_bench.models import CheckpointError, ModelConfigError, load_model
from dllm_bench.models.tiny_format import save_checkpoint

REF = Path(dllm_bench.models.__file__).parent / "reference_configs"


@pytest.fixture
def llada_copy(tiny_llada_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_llada_dir, tmp_path / "ckpt"))


@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_loads_with_tokenizer_and_returns_logits(flavour: str, tiny_llada_dir: Path, tiny_dream_dir: Path) -> None:
    model = load_model(tiny_llada_dir if flavour == "llada" else tiny_dream_dir)
    assert model.config.flavour == flavour and model.dtype == torch.float32 and model.device.type == "cpu"
    ids = torch.randint(0, 90, (3, 11))
    assert model(ids).shape == (3, 11, model.config.vocab_size)
    tok = model.tokenizer
    assert tok.mask_token_id == model.config.mask_token_id
    assert model.config.eot_token_id in model.config.stop_token_ids
    prompt = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True)
    head = "<|startoftext|><|start_header_id|>user" if flavour == "llada" else "<|im_start|>system"
    assert prompt.startswith(head) and "2+2?" in prompt
    assert tok.decode(tok(prompt, add_special_tokens=False)["input_ids"]) == prompt


def test_config_has_every_key_of_the_real_llada_config(tiny_llada_dir: Path) -> None:
    real = json.loads((REF / "llada-8b-instruct" / "config.json").read_text())
    ours = json.loads((tiny_llada_dir / "config.json").read_text())
    assert set(real) - {"_name_or_path", "transformers_version"} <= set(ours)
    tok_cfg = json.loads((tiny_llada_dir / "tokenizer_config.json").read_text())
    assert tok_cfg["tokenizer_class"] == "PreTrainedTokenizerFast" and "chat_template" in tok_cfg


def test_state_dict_round_trip(tiny_dream_dir: Path, tmp_path: Path) -> None:
    model = load_model(tiny_dream_dir)
    on_disk = load_file(str(tiny_dream_dir / "model.safetensors"))
    assert set(model.state_dict()) == set(on_disk)
    cfg = json.loads((tiny_dream_dir / "config.json").read_text())
    again = load_model(save_checkpoint(model, model.tokenizer, tmp_path / "again", cfg))
    for k, v in again.state_dict().items():
        assert torch.equal(v, on_disk[k])


def test_sharded_checkpoint(llada_copy: Path) -> None:
    tensors = load_file(str(llada_copy / "model.safetensors"))
    (llada_copy / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for fname, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(llada_copy / fname))
    weight_map = {k: f for f, keys in shards.items() for k in keys}
    (llada_copy / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    model = load_model(llada_copy)
    for k, v in model.state_dict().items():
        assert torch.equal(v, tensors[k])
    (llada_copy / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model-00002-of-00002.safetensors"):
        load_model(llada_copy)


def test_llama_style_tensor_names_load_into_a_llada_config(llada_copy: Path) -> None:
    """LLaDA-V re-keys the language model to LLaMA names; an OLMo-style config still loads them."""
    tensors = load_file(str(llada_copy / "model.safetensors"))
    ref = load_model(llada_copy)
    renamed = {}
    for k, v in tensors.items():
        k = k.replace("model.transformer.wte", "model.embed_tokens").replace("model.transformer.ln_f", "model.norm")
        k = k.replace("model.transformer.ff_out", "lm_head").replace("model.transformer.blocks", "model.layers")
        for a, b in [("attn_out", "self_attn.o_proj"), ("q_proj", "self_attn.q_proj"), ("k_proj", "self_attn.k_proj"),
                     ("v_proj", "self_attn.v_proj"), ("ff_proj", "mlp.gate_proj"), ("up_proj", "mlp.up_proj"),
                     ("ff_out", "mlp.down_proj"), ("attn_norm", "input_layernorm"), ("ff_norm", "post_attention_layernorm")]:
            k = k.replace(f".{a}.", f".{b}.")
        renamed[k] = v
    save_file(renamed, str(llada_copy / "model.safetensors"))
    model = load_model(llada_copy)
    assert model.config.tensor_naming == "llama" and "lm_head.weight" in model.state_dict()
    ids = torch.randint(0, 90, (1, 7))
    torch.testing.assert_close(model(ids), ref(ids))


def test_meta_device_reads_no_weights(llada_copy: Path) -> None:
    (llada_copy / "model.safetensors").write_bytes(b"not a safetensors file")
    model = load_model(llada_copy, device="meta")
    assert model.embed.weight.is_meta


def test_no_checkpoint_code_is_executed(llada_copy: Path, tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    for name in ("modeling_llada.py", "configuration_llada.py"):
        (llada_copy / name).write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    load_model(llada_copy)
    assert not marker.exists()


def test_missing_directory_and_config(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        load_model(tmp_path / "does-not-exist")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path / "empty")


def test_wrong_model_type(llada_copy: Path) -> None:
    cfg = json.loads((llada_copy / "config.json").read_text())
    cfg["model_type"] = "bert"
    (llada_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelConfigError, match=r"model_type 'bert'.*allowed.*llada"):
        load_model(llada_copy)


def test_renamed_tensor_is_named(llada_copy: Path) -> None:
    tensors = load_file(str(llada_copy / "model.safetensors"))
    tensors["model.transformer.blocks.1.q_projection.weight"] = tensors.pop("model.transformer.blocks.1.q_proj.weight")
    save_file(tensors, str(llada_copy / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'model.transformer.blocks.1.q_projection.weight'"):
        load_model(llada_copy)


def test_missing_tensor_is_named(llada_copy: Path) -> None:
    tensors = load_file(str(llada_copy / "model.safetensors"))
    del tensors["model.transformer.ln_f.weight"]
    save_file(tensors, str(llada_copy / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'model.transformer.ln_f.weight'"):
        load_model(llada_copy)


def test_wrong_shape_names_tensor_and_both_shapes(llada_copy: Path) -> None:
    tensors = load_file(str(llada_copy / "model.safetensors"))
    tensors["model.transformer.blocks.0.up_proj.weight"] = torch.zeros(10, 64)
    save_file(tensors, str(llada_copy / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"'model.transformer.blocks.0.up_proj.weight'.*\[10, 64\].*\[256, 64\]"):
        load_model(llada_copy)


def test_corrupted_weight_file(llada_copy: Path) -> None:
    data = (llada_copy / "model.safetensors").read_bytes()
    (llada_copy / "model.safetensors").write_bytes(data[:50])
    with pytest.raises(CheckpointError, match=r"model.safetensors is corrupted"):
        load_model(llada_copy)


def test_hub_id_offline_gives_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="GSAI-ML/LLaDA-8B-Instruct"):
        load_model("GSAI-ML/LLaDA-8B-Instruct", device="meta")


def test_checkpoint_fingerprint_follows_content_not_mtime(llada_copy: Path, tmp_path: Path) -> None:
    from dllm_bench.models.loading import checkpoint_fingerprint
    from dllm_bench.models.tiny_format import make_random_checkpoint

    first = checkpoint_fingerprint(llada_copy)
    (llada_copy / "model.safetensors").touch()
    assert checkpoint_fingerprint(llada_copy) == first
    make_random_checkpoint(llada_copy, "llada", seed=7)
    assert checkpoint_fingerprint(llada_copy) not in (None, first)
    assert checkpoint_fingerprint("GSAI-ML/LLaDA-8B-Instruct") is None
