"""LLaDA-V network: real architecture on meta, checkpoint format, vision tower, feature merge, input building."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file

import dllm_bench.models
from dllm_bench.models import CheckpointError, load_model
from dllm_bench.models.llada_v import (
    IMAGE_PLACEHOLDER_ID,
    LLaDAV,
    SiglipTower,
    VisionSettings,
    language_config,
)

REF = Path(dllm_bench.models.__file__).parent / "reference_configs" / "llada-v-language-model"
# LLaVA-OneVision keys with LLaDA-V's published values (ML-GSAI/LLaDA-V train/scripts/llada_v_sft.sh)
PUBLISHED_VISION_KEYS = {
    "model_type": "llava_llada", "architectures": ["LlavaLLaDAModelLM"],
    "mm_vision_tower": "google/siglip2-so400m-patch14-384", "mm_hidden_size": 1152, "mm_projector_type": "mlp2x_gelu",
    "mm_vision_select_layer": -2, "mm_patch_merge_type": "spatial_unpad", "image_aspect_ratio": "anyres_max_4",
    "image_grid_pinpoints": "(1x1),...,(6x6)",
}
VT = "model.vision_tower.vision_tower.vision_model."


def test_real_llada_v_architecture_on_meta(tmp_path: Path) -> None:
    """Language model = the reference LLaMA-style index, name for name and byte for byte; SigLIP so400m minus
    its last layer; mlp2x_gelu projector 1152 -> 4096 -> 4096; image newline [4096]."""
    cfg = {**json.loads((REF / "config.json").read_text()), **PUBLISHED_VISION_KEYS}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model = load_model(tmp_path, device="meta")
    assert isinstance(model, LLaDAV)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    index = json.loads((REF / "model.safetensors.index.json").read_text())
    lm = {k: s for k, s in shapes.items() if not k.startswith((VT, "model.mm_projector.", "model.image_newline"))}
    assert set(lm) == set(index["weight_map"])
    assert sum(2 * math.prod(s) for s in lm.values()) == index["metadata"]["total_size"]  # bf16 bytes

    vision = {k[len(VT):]: s for k, s in shapes.items() if k.startswith(VT)}
    assert vision["embeddings.patch_embedding.weight"] == (1152, 3, 14, 14)
    assert vision["embeddings.position_embedding.weight"] == (729, 1152)  # 27 x 27 patches of a 384 px tile
    layers = {int(k.split(".")[2]) for k in vision if k.startswith("encoder.layers.")}
    assert layers == set(range(26))  # 27 layers, select_layer -2: the last never runs
    assert vision["encoder.layers.25.mlp.fc1.weight"] == (4304, 1152)
    assert vision["encoder.layers.0.self_attn.q_proj.bias"] == (1152,)
    assert len(vision) == 3 + 26 * 16
    assert shapes["model.mm_projector.0.weight"] == (4096, 1152)
    assert shapes["model.mm_projector.2.weight"] == (4096, 4096)
    assert shapes["model.mm_projector.2.bias"] == (4096,)
    assert shapes["model.image_newline"] == (4096,)
    c = model.config
    assert (c.mask_token_id, c.eos_token_id, c.d_model, c.n_layers) == (126336, 126081, 4096, 32)
    assert c.bos_token_id is None  # LLaMA-3's 128000 in the file is outside LLaDA's vocabulary; the tokenizer fills it
    assert c.is_instruct and c.tensor_naming == "llama"
    n_vision = sum(math.prod(s) for k, s in shapes.items() if not k.startswith(tuple(index["weight_map"])))
    print(f"LLaDA-V vision tower + projector + newline: {n_vision:,} parameters")


def test_checkpoint_round_trip_uses_real_tensor_names(tiny_llada_v: LLaDAV, tiny_llada_v_dir: Path) -> None:
    on_disk = load_file(str(tiny_llada_v_dir / "model.safetensors"))
    state = tiny_llada_v.state_dict()
    assert set(state) == set(on_disk)
    assert "model.mm_projector.0.weight" in on_disk and "lm_head.weight" in on_disk
    assert f"{VT}encoder.layers.1.self_attn.out_proj.weight" in on_disk
    for k, v in on_disk.items():
        assert torch.equal(state[k], v), k
    assert tiny_llada_v.vision_tower.embeddings.position_ids.device.type == "cpu"


def test_unused_vision_tensors_are_ignored_missing_ones_named(tiny_llada_v_dir: Path, tmp_path: Path) -> None:
    tensors = load_file(str(tiny_llada_v_dir / "model.safetensors"))
    d = tmp_path / "extra"
    shutil.copytree(tiny_llada_v_dir, d)
    extra = dict(tensors)
    extra[f"{VT}post_layernorm.weight"] = torch.ones(32)
    extra[f"{VT}head.probe"] = torch.ones(1, 1, 32)
    extra[f"{VT}encoder.layers.2.mlp.fc1.weight"] = torch.ones(64, 32)  # the last layer, never run
    save_file(extra, str(d / "model.safetensors"))
    assert isinstance(load_model(d, device="cpu"), LLaDAV)

    missing = dict(tensors)
    del missing["model.mm_projector.2.weight"]
    save_file(missing, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.mm_projector\.2\.weight'"):
        load_model(d, device="cpu")

    wrong = dict(tensors)
    wrong["model.image_newline"] = torch.ones(65)
    save_file(wrong, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"'model\.image_newline'.*shape \[65\]"):
        load_model(d, device="cpu")


def test_vision_tower_is_transformers_siglip_hidden_state_minus_two() -> None:
    """Our tower's output equals SiglipVisionModel's hidden_states[-2] (LLaVA's select layer -2)."""
    from transformers import SiglipVisionConfig, SiglipVisionModel

    tower_cfg = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
                 "image_size": 28, "patch_size": 14}
    torch.manual_seed(0)
    ref = SiglipVisionModel(SiglipVisionConfig(**tower_cfg, vision_use_head=False)).eval()
    settings = VisionSettings.from_hf_config({"vision_config": tower_cfg, "image_aspect_ratio": "square"})
    ours = SiglipTower(settings).eval()
    ref_state = {k.removeprefix("vision_model."): v for k, v in ref.state_dict().items()}
    ours.load_state_dict({k: ref_state[k] for k in ours.state_dict()}, strict=True)
    pixels = torch.randn(3, 3, 28, 28)
    with torch.no_grad():
        expected = ref(pixel_values=pixels, output_hidden_states=True).hidden_states[-2]
        got = ours(pixels)
    assert got.shape == (3, 4, 32)
    assert torch.allclose(got, expected, atol=1e-5)


def _upstream_merge(model: LLaDAV, feats: torch.Tensor, image_size: tuple[int, int], grid: tuple[int, int]) -> torch.Tensor:
    """LLaVA-OneVision's spatial_unpad + anyres_max merge, step by step as its prepare_inputs does it."""
    unit = model.vision.anyres.features_per_side
    base, rest = feats[0], feats[1:]
    cols, rows = grid
    x = rest.view(rows, cols, unit, unit, -1).permute(4, 0, 2, 1, 3).contiguous().flatten(1, 2).flatten(2, 3)
    ow, oh = image_size
    ch, cw = x.shape[1:]
    if ow / oh > cw / ch:
        new_h = int(oh * (cw / ow))
        pad = (ch - new_h) // 2
        x = x[:, pad : ch - pad, :]
    else:
        new_w = int(ow * (ch / oh))
        pad = (cw - new_w) // 2
        x = x[:, :, pad : cw - pad]
    c, h, w = x.shape
    times = math.sqrt(h * w / (4 * unit**2))
    if times > 1.1:
        x = F.interpolate(x[None], [int(h // times), int(w // times)], mode="bilinear")[0]
    x = torch.cat((x, model.image_newline[:, None, None].expand(*x.shape[:-1], 1)), dim=-1)
    return torch.cat((base, x.flatten(1, 2).transpose(0, 1)), dim=0)


def test_merge_equals_upstream_order_of_operations(tiny_llada_v: LLaDAV, png_images: list[Path]) -> None:
    for path in png_images:
        img = Image.open(path)
        p = tiny_llada_v.preprocess(img)
        feats = tiny_llada_v.mm_projector(tiny_llada_v.vision_tower(p.pixel_values)).detach()
        got = tiny_llada_v.merge_tiles(feats, p)
        assert torch.equal(got, _upstream_merge(tiny_llada_v, feats, img.size, p.grid).detach()), path.name
        assert got.shape[0] == tiny_llada_v.image_token_count(img)


def _prompt(model: LLaDAV, question: str, with_image: bool = True) -> str:
    content = ("<image>\n" if with_image else "") + question
    return model.tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False)


def test_build_inputs_places_each_image_at_its_placeholder(tiny_llada_v: LLaDAV, png_images: list[Path]) -> None:
    m = tiny_llada_v
    a, b = Image.open(png_images[0]), Image.open(png_images[4])
    prompts = [_prompt(m, "Which is larger?").replace("<image>\n", "<image> and <image>\n"), _prompt(m, "Hi", False)]
    batch = m.build_inputs(prompts, [[a, b], []], gen_length=8)
    na, nb = m.image_token_count(a), m.image_token_count(b)
    assert batch.image_tokens == [[na, nb], []]
    where, embeds = batch.model_kwargs["image_where"], batch.model_kwargs["image_embeds"]
    assert where.shape == (2, batch.input_ids.shape[1] + 8) and embeds.shape[:2] == where.shape
    assert int(where[0].sum()) == na + nb and int(where[1].sum()) == 0
    assert not where[:, -8:].any()  # nothing in the answer region
    ids = m.encode_prompt(prompts[0])
    first = ids.index(IMAGE_PLACEHOLDER_ID)
    pad_left = batch.input_ids.shape[1] - (len(ids) - 2 + na + nb)
    assert int(batch.attention_mask[0].sum()) == batch.input_ids.shape[1] - pad_left
    idx = where[0].nonzero().squeeze(1)
    assert int(idx[0]) == pad_left + first
    expected = m.image_embeddings([m.preprocess(a), m.preprocess(b)])
    assert torch.allclose(embeds[0, idx], torch.cat(expected))
    assert bool((batch.input_ids[0, idx] == m.config.bos_token_id).all())


def test_build_inputs_refuses_mismatched_images(tiny_llada_v: LLaDAV, png_images: list[Path]) -> None:
    img = Image.open(png_images[0])
    with pytest.raises(ValueError, match=r"prompt 0 has 0 '<image>' placeholder\(s\) but 1 image"):
        tiny_llada_v.build_inputs([_prompt(tiny_llada_v, "x", False)], [[img]], gen_length=4, add_placeholders=False)
    with pytest.raises(ValueError, match=r"prompt 0 has 2 '<image>' placeholder\(s\) but 1 image"):
        tiny_llada_v.build_inputs(["<image><image>x"], [[img]], gen_length=4)
    with pytest.raises(ValueError, match="2 prompts but 1 image lists"):
        tiny_llada_v.build_inputs(["a", "b"], [[]], gen_length=4)
    with pytest.raises(ValueError, match="image_where and image_embeds together"):
        tiny_llada_v(torch.zeros(1, 3, dtype=torch.long), image_where=torch.zeros(1, 3, dtype=torch.bool))


def test_image_rows_batched_equal_alone(tiny_llada_v: LLaDAV, png_images: list[Path]) -> None:
    """Left padding and other rows change nothing: per-row logits of a mixed batch equal each row alone."""
    m = tiny_llada_v
    prompts = [_prompt(m, "What is shown?"), _prompt(m, "Describe the picture in detail."), _prompt(m, "Hi", False)]
    images = [[Image.open(png_images[0])], [Image.open(png_images[1])], []]
    g = 6

    def logits(batch) -> torch.Tensor:
        b, p = batch.input_ids.shape
        canvas = torch.cat([batch.input_ids, torch.full((b, g), m.config.mask_token_id)], dim=1)
        mask = torch.cat([batch.attention_mask, torch.ones(b, g, dtype=torch.long)], dim=1)
        with torch.no_grad():
            return m(canvas, mask, **batch.model_kwargs)[:, -g:]

    together = logits(m.build_inputs(prompts, images, gen_length=g))
    for i in range(3):
        alone = logits(m.build_inputs(prompts[i : i + 1], images[i : i + 1], gen_length=g))
        assert torch.allclose(together[i], alone[0], atol=1e-4), i
    # and the image matters: the same prompt with another image gives other logits
    other = logits(m.build_inputs(prompts[:1], [[Image.open(png_images[4])]], gen_length=g))
    assert not torch.allclose(other[0], together[0], atol=1e-3)


def test_language_config_rejects_other_model_types() -> None:
    with pytest.raises(ValueError, match="model_type 'llava_qwen'"):
        language_config({"model_type": "llava_qwen"})
    with pytest.raises(ValueError, match="mm_vision_select_layer -30"):
        VisionSettings.from_hf_config({"mm_vision_select_layer": -30})
    with pytest.raises(ValueError, match="mm_projector_type 'identity'"):
        VisionSettings.from_hf_config({"mm_projector_type": "identity"})


def test_missing_placeholder_goes_to_the_start_of_the_user_turn(tiny_llada_v: LLaDAV, png_images: list[Path]) -> None:
    """lmms-eval writes '<image>\\n' + question when the question has none; the result is the same input."""
    m, img = tiny_llada_v, Image.open(png_images[0])
    auto = m.build_inputs([_prompt(m, "What is it?", False)], [[img]], gen_length=4)
    explicit = m.build_inputs([_prompt(m, "What is it?", True)], [[img]], gen_length=4)
    assert torch.equal(auto.input_ids, explicit.input_ids)
    assert torch.equal(auto.model_kwargs["image_where"], explicit.model_kwargs["image_where"])
