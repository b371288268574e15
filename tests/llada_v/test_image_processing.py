"""LLaVA-OneVision any-resolution tiling as LLaDA-V configures it: shapes, token counts, pixel values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from dllm_bench.models.image_processing import (
    AnyResConfig,
    image_token_count,
    merged_grid_shape,
    parse_grid_pinpoints,
    preprocess_image,
    select_best_resolution,
)

# The published LLaDA-V settings (train/scripts/llada_v_sft.sh): anyres_max_4, (1x1),...,(6x6), spatial_unpad,
# SigLIP so400m-patch14-384.
PUBLISHED = {"image_aspect_ratio": "anyres_max_4", "image_grid_pinpoints": "(1x1),...,(6x6)", "mm_patch_merge_type": "spatial_unpad"}


@pytest.fixture(scope="module")
def cfg() -> AnyResConfig:
    return AnyResConfig.from_model_config(PUBLISHED, tile_size=384, patch_size=14)


def noise_image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8))


def test_grid_pinpoints_shorthand_expands_width_major(cfg: AnyResConfig) -> None:
    pins = cfg.grid_pinpoints
    assert len(pins) == 36
    assert pins[:3] == ((384, 384), (384, 768), (384, 1152))
    assert pins[-1] == (2304, 2304)
    assert parse_grid_pinpoints([[384, 768], [768, 384]], 384) == ((384, 768), (768, 384))
    assert parse_grid_pinpoints("[[384, 768]]", 384) == ((384, 768),)


@pytest.mark.parametrize(
    ("size", "grid", "tokens"),
    [
        ((384, 384), (1, 1), 729 + 27 * 28),  # one tile, nothing to unpad or shrink
        ((1000, 500), (3, 2), 729 + 40 * 82),  # 3x2 grid, rows 7..47 of 54 kept, sqrt(40*81/2916) < 1.1
        ((300, 1200), (1, 4), None),
        ((2000, 1500), (6, 4), None),  # 2304x1536 holds it at scale 1.024; features shrunk to ~4 tiles
    ],
)
def test_published_config_shapes(cfg: AnyResConfig, size: tuple[int, int], grid: tuple[int, int], tokens: int | None) -> None:
    processed = preprocess_image(noise_image(*size), cfg)
    assert processed.grid == grid
    assert processed.pixel_values.shape == (1 + grid[0] * grid[1], 3, 384, 384)
    assert processed.pixel_values.dtype == torch.float32
    assert processed.image_size == size
    n = image_token_count(size, cfg)
    if tokens is not None:
        assert n == tokens
    rows, cols = merged_grid_shape(size, grid, cfg)
    assert n == 729 + rows * (cols + 1)
    # anyres_max_4 keeps the grid part at about 4 tiles' worth of features (1.1 slack, then floors)
    assert rows * cols <= 1.1**2 * 4 * 729


def test_overview_tile_and_padding_values(cfg: AnyResConfig) -> None:
    # a uniform grey 1000x500 image: the overview tile is all grey; the grid tiles have black padding bands
    grey = Image.new("RGB", (1000, 500), (255, 255, 255))
    px = preprocess_image(grey, cfg).pixel_values
    assert torch.allclose(px[0], torch.ones_like(px[0]))  # white -> +1 after mean/std 0.5
    top_left = px[1]  # first grid tile: top rows are padding (black -> -1)
    assert torch.allclose(top_left[:, 0, :], -torch.ones_like(top_left[:, 0, :]))
    assert torch.allclose(top_left[:, -1, :], torch.ones_like(top_left[:, -1, :]))


def test_rgba_and_greyscale_inputs_become_rgb(cfg: AnyResConfig) -> None:
    for mode in ("L", "RGBA", "P"):
        img = noise_image(500, 400).convert(mode)
        assert preprocess_image(img, cfg).pixel_values.shape[1] == 3


def test_select_best_resolution_prefers_least_waste() -> None:
    cands = [(384, 384), (768, 384), (384, 768), (768, 768)]
    assert select_best_resolution((700, 300), cands) == (768, 384)
    assert select_best_resolution((300, 700), cands) == (384, 768)
    assert select_best_resolution((100, 100), cands) == (384, 384)


def test_matches_transformers_llava_onevision_processor(cfg: AnyResConfig) -> None:
    """An independent implementation (transformers' LLaVA-OneVision PIL processor) gives the same pixels."""
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )

    # transformers reads pinpoints as (height, width); the published set is symmetric, so the set is the same
    ref = LlavaOnevisionImageProcessorPil(
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], image_grid_pinpoints=[list(p) for p in cfg.grid_pinpoints]
    )
    for size in [(500, 300), (200, 450)]:
        img = noise_image(*size, seed=size[0])
        ours = preprocess_image(img, cfg).pixel_values
        theirs = torch.as_tensor(np.asarray(ref(img, return_tensors="np")["pixel_values"][0]))
        assert ours.shape == theirs.shape, size
        assert torch.allclose(ours, theirs, atol=1e-5), size


@pytest.mark.parametrize("size", [(640, 480), (333, 777), (1000, 500), (1920, 1080), (50, 2000)])
def test_token_count_matches_transformers_formula(cfg: AnyResConfig, size: tuple[int, int]) -> None:
    from transformers.models.llava_onevision.processing_llava_onevision import LlavaOnevisionProcessor

    proc = LlavaOnevisionProcessor.__new__(LlavaOnevisionProcessor)  # only its arithmetic is used
    proc.image_processor = type("P", (), {"image_grid_pinpoints": [list(p) for p in cfg.grid_pinpoints]})()
    proc.num_image_tokens = 729
    proc.vision_aspect_ratio = "anyres_max_4"
    w, h = size
    assert image_token_count(size, cfg) == proc._get_number_of_features(h, w, 384, 384)


def test_non_anyres_modes() -> None:
    square = AnyResConfig(tile_size=28, patch_size=14, aspect_ratio="square", merge_type="flat")
    assert preprocess_image(noise_image(50, 30), square).pixel_values.shape == (1, 3, 28, 28)
    assert image_token_count((50, 30), square) == 4
    pad = AnyResConfig(tile_size=28, patch_size=14, aspect_ratio="pad", merge_type="flat")
    px = preprocess_image(Image.new("RGB", (56, 28), (255, 255, 255)), pad).pixel_values
    assert px.shape == (1, 3, 28, 28)
    assert torch.allclose(px[0, :, 0, :], torch.full_like(px[0, :, 0, :], 127 / 255 * 2 - 1))  # mean-grey band


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="image_aspect_ratio 'anyres_max_x'"):
        AnyResConfig(aspect_ratio="anyres_max_x", grid_pinpoints=((384, 384),))
    with pytest.raises(ValueError, match="needs image_grid_pinpoints"):
        AnyResConfig(aspect_ratio="anyres")
    with pytest.raises(ValueError, match="mm_patch_merge_type"):
        AnyResConfig(merge_type="spatial_maxpool", aspect_ratio="square")
    with pytest.raises(ValueError, match="patch_size 40"):
        AnyResConfig(tile_size=30, patch_size=40, aspect_ratio="square")
    with pytest.raises(TypeError, match="PIL"):
        preprocess_image(np.zeros((4, 4, 3)), AnyResConfig(aspect_ratio="square"))  # type: ignore[arg-type]
