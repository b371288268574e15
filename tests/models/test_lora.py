"""PEFT LoRA adapters (models/lora.py): the shipped tiny D2F adapters in PEFT's exact format, the merge against a
reference written here, an adapter directory loading its base, and the one-line refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from dllm_bench.models import load_model
from dllm_bench.models.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, D2F_TARGET_MODULES, AdapterError
from dllm_bench.models.tiny_lora import make_random_d2f_adapter

CHECKPOINTS = Path(__file__).resolve().parents[2] / "dllm_bench" / "tiny" / "checkpoints"


@pytest.mark.parametrize(("flavour", "module"), [("llada", "model.transformer.blocks.{i}.{m}"),
                                                 ("dream", "model.layers.{i}.self_attn.{m}")])
def test_shipped_adapters_carry_peft_names_for_d2f_targets(flavour, module):
    directory = CHECKPOINTS / f"tiny_{flavour}_d2f"
    cfg = json.loads((directory / ADAPTER_CONFIG).read_text())
    assert cfg["peft_type"] == "LORA" and sorted(cfg["target_modules"]) == sorted(D2F_TARGET_MODULES[flavour])
    assert cfg["base_model_name_or_path"] == f"../tiny_{flavour}"
    layers = json.loads((CHECKPOINTS / f"tiny_{flavour}" / "config.json").read_text())
    n = layers.get("n_layers") or layers["num_hidden_layers"]
    expected = {f"base_model.model.{module.format(i=i, m=m)}.lora_{ab}.weight"
                for i in range(n) for m in D2F_TARGET_MODULES[flavour] for ab in "AB"}
    with safe_open(str(directory / ADAPTER_WEIGHTS), "pt") as f:
        assert set(f.keys()) == expected
        assert all(f.get_tensor(k).shape[0 if ".lora_A" in k else 1] == cfg["r"] for k in f.keys())  # noqa: SIM118


@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_an_adapter_directory_loads_its_base_with_the_lora_merged(flavour):
    """Every tensor: the base's plus alpha / r * B @ A where the adapter has a pair (a reference from the files)."""
    adapter = CHECKPOINTS / f"tiny_{flavour}_d2f"
    merged = load_model(adapter, device="cpu").state_dict()
    base = load_file(str(CHECKPOINTS / f"tiny_{flavour}" / "model.safetensors"))
    lora = load_file(str(adapter / ADAPTER_WEIGHTS))
    cfg = json.loads((adapter / ADAPTER_CONFIG).read_text())
    changed = 0
    for name, w in base.items():
        key = "base_model.model." + name.removesuffix(".weight")
        want = w
        if key + ".lora_A.weight" in lora:
            want = w + cfg["lora_alpha"] / cfg["r"] * (lora[key + ".lora_B.weight"] @ lora[key + ".lora_A.weight"])
            changed += 1
        torch.testing.assert_close(merged[name], want, rtol=0, atol=1e-6)
    assert changed == len(lora) // 2 > 0


def _copy(tmp_path: Path, flavour: str = "llada") -> Path:
    out = tmp_path / "adapter"
    shutil.copytree(CHECKPOINTS / f"tiny_{flavour}_d2f", out)
    cfg = json.loads((out / ADAPTER_CONFIG).read_text())
    cfg["base_model_name_or_path"] = str(CHECKPOINTS / f"tiny_{flavour}")
    (out / ADAPTER_CONFIG).write_text(json.dumps(cfg))
    return out


def test_a_dream_adapter_on_the_llada_base_is_refused(tmp_path):
    out = _copy(tmp_path, "dream")
    cfg = json.loads((out / ADAPTER_CONFIG).read_text())
    cfg["base_model_name_or_path"] = str(CHECKPOINTS / "tiny_llada")
    (out / ADAPTER_CONFIG).write_text(json.dumps(cfg))
    with pytest.raises(AdapterError, match=r"targets 'model\.layers\.0\.self_attn\.k_proj\.weight', which the base"):
        load_model(out, device="cpu")


def test_wrong_shapes_and_unsupported_keys_are_refused(tmp_path):
    out = _copy(tmp_path)
    tensors = load_file(str(out / ADAPTER_WEIGHTS))
    name = next(k for k in tensors if k.endswith("lora_A.weight"))
    tensors[name] = tensors[name][:, :-1].contiguous()
    save_file(tensors, str(out / ADAPTER_WEIGHTS))
    with pytest.raises(AdapterError, match="must be \\[r, in\\] and \\[out, r\\]"):
        load_model(out, device="cpu")
    out2 = _copy(tmp_path / "b")
    cfg = json.loads((out2 / ADAPTER_CONFIG).read_text())
    cfg["use_dora"] = True
    (out2 / ADAPTER_CONFIG).write_text(json.dumps(cfg))
    with pytest.raises(AdapterError, match="use_dora=True, which the LoRA merge does not compute"):
        load_model(out2, device="cpu")


def test_a_missing_half_is_refused(tmp_path):
    out = _copy(tmp_path)
    tensors = {k: v for k, v in load_file(str(out / ADAPTER_WEIGHTS)).items() if "blocks.0.q_proj.lora_B" not in k}
    save_file(tensors, str(out / ADAPTER_WEIGHTS))
    with pytest.raises(AdapterError, match="has only \\['lora_A'\\]"):
        load_model(out, device="cpu")


def test_the_generator_is_deterministic_and_writes_the_shipped_format(tmp_path):
    """The random maker writes the shipped (trained) adapter's config and tensor names and shapes, the same twice."""
    out = make_random_d2f_adapter(CHECKPOINTS / "tiny_llada", tmp_path / "a", seed=0, base_name="../tiny_llada")
    again = make_random_d2f_adapter(CHECKPOINTS / "tiny_llada", tmp_path / "b", seed=0, base_name="../tiny_llada")
    shipped = load_file(str(CHECKPOINTS / "tiny_llada_d2f" / ADAPTER_WEIGHTS))
    made = load_file(str(out / ADAPTER_WEIGHTS))
    assert {k: v.shape for k, v in made.items()} == {k: v.shape for k, v in shipped.items()}
    assert all(torch.equal(v, load_file(str(again / ADAPTER_WEIGHTS))[k]) for k, v in made.items())
    assert (out / ADAPTER_CONFIG).read_text() == (CHECKPOINTS / "tiny_llada_d2f" / ADAPTER_CONFIG).read_text()


def test_anchored_blocks_of_the_decoder_need_a_block_size():
    model = load_model(CHECKPOINTS / "tiny_llada_d2f", device="cpu", attention="block_causal", block_grid="anchored")
    ids = torch.arange(1, 13).unsqueeze(0)
    with pytest.raises(ValueError, match="give block_size to the forward"):
        model(ids, block_anchor=4)
    with torch.no_grad():
        two = model(ids, block_anchor=4, block_size=2)
        four = model(ids, block_anchor=4, block_size=4)
        full = load_model(CHECKPOINTS / "tiny_llada_d2f", device="cpu")(ids)
    torch.testing.assert_close(two[:, :4], four[:, :4], rtol=1e-5, atol=1e-5)  # the prompt attends the prompt only
    assert not torch.allclose(two[:, 6:], four[:, 6:], atol=1e-3) and not torch.allclose(two, full, atol=1e-3)
    with pytest.raises(ValueError, match="block_anchor and block_size are for block-causal attention"):
        load_model(CHECKPOINTS / "tiny_llada", device="cpu")(ids, block_size=4)
