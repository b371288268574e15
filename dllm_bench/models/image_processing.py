"""LLaVA-OneVision "any resolution" image tiling, as LLaDA-V's checkpoint configures it.

LLaDA-V trains and evaluates with ``image_aspect_ratio = anyres_max_4``, ``image_grid_pinpoints =
(1x1),...,(6x6)`` (tile multiples of the 384 px SigLIP input) and ``mm_patch_merge_type = spatial_unpad``.
An image becomes one resized overview tile plus the tiles of the best-fitting grid resolution; after the
vision tower, the grid's feature map is cropped back to the image's aspect ratio ("unpad"), shrunk to about
``max_tiles`` tiles' worth of features when larger ("anyres_max"), and each feature row gets a newline embedding.

This module is the pixel side and the shape arithmetic (pure, no network): :func:`preprocess_image` gives the
pixel tiles, :func:`image_token_count` the number of embeddings the network will splice in for that image.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

SUPPORTED_ASPECT_RATIOS = ("anyres", "anyres_max_N", "pad", "square")
SUPPORTED_MERGE_TYPES = ("spatial_unpad", "flat")


@dataclass(frozen=True)
class AnyResConfig:
    """Pixel preprocessing and feature-merge settings, read from a LLaVA-style ``config.json``."""

    tile_size: int = 384  # the vision tower's input side (SigLIP so400m-patch14-384)
    patch_size: int = 14  # vision patch side: a tile gives (tile_size // patch_size)^2 features (384 px -> 27^2)
    grid_pinpoints: tuple[tuple[int, int], ...] = ()  # candidate (width, height) resolutions in pixels
    aspect_ratio: str = "anyres_max_4"
    merge_type: str = "spatial_unpad"
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    def __post_init__(self) -> None:
        if not 0 < self.patch_size <= self.tile_size:
            raise ValueError(f"patch_size {self.patch_size} must be in [1, tile_size={self.tile_size}]")
        if not (self.aspect_ratio in ("anyres", "pad", "square") or re.fullmatch(r"anyres_max_\d+", self.aspect_ratio)):
            raise ValueError(f"image_aspect_ratio {self.aspect_ratio!r} is not supported; allowed: {SUPPORTED_ASPECT_RATIOS}")
        if self.merge_type not in SUPPORTED_MERGE_TYPES:
            raise ValueError(f"mm_patch_merge_type {self.merge_type!r} is not supported; allowed: {SUPPORTED_MERGE_TYPES}")
        if self.is_anyres and not self.grid_pinpoints:
            raise ValueError(f"image_aspect_ratio {self.aspect_ratio!r} needs image_grid_pinpoints; none given")

    @property
    def is_anyres(self) -> bool:
        return self.aspect_ratio.startswith("anyres")

    @property
    def max_tiles(self) -> int | None:
        """N of ``anyres_max_N``: the grid features are shrunk to about N tiles' worth (None: never shrunk)."""
        m = re.fullmatch(r"anyres_max_(\d+)", self.aspect_ratio)
        return int(m.group(1)) if m else None

    @property
    def features_per_side(self) -> int:
        return self.tile_size // self.patch_size

    @classmethod
    def from_model_config(cls, cfg: dict[str, Any], tile_size: int, patch_size: int) -> AnyResConfig:
        """Settings from a LLaVA-style config: ``image_aspect_ratio``, ``image_grid_pinpoints``, ``mm_patch_merge_type``."""
        aspect = cfg.get("image_aspect_ratio") or "square"
        pinpoints = cfg.get("image_grid_pinpoints")
        return cls(
            tile_size=tile_size,
            patch_size=patch_size,
            grid_pinpoints=parse_grid_pinpoints(pinpoints, tile_size) if pinpoints is not None else (),
            aspect_ratio=aspect,
            merge_type=cfg.get("mm_patch_merge_type") or "flat",
        )


def parse_grid_pinpoints(value: str | Sequence[Sequence[int]], tile_size: int) -> tuple[tuple[int, int], ...]:
    """Candidate (width, height) resolutions from the config's value.

    ``"(1x1),...,(6x6)"`` is the published shorthand: every (w, h) tile multiple from the first to the last
    pair, w outer and h inner (the order decides ties), times ``tile_size``. A list of pixel pairs, or its
    string form, is taken as written.
    """
    if isinstance(value, str) and "x" in value:
        pairs = re.findall(r"\((\d+)x(\d+)\)", value)
        if not pairs:
            raise ValueError(f"image_grid_pinpoints {value!r}: expected the form '(1x1),...,(6x6)'")
        (w0, h0), (w1, h1) = (tuple(map(int, pairs[0])), tuple(map(int, pairs[-1])))
        return tuple((w * tile_size, h * tile_size) for w in range(w0, w1 + 1) for h in range(h0, h1 + 1))
    if isinstance(value, str):
        value = ast.literal_eval(value)
    out = tuple((int(p[0]), int(p[1])) for p in value)
    if not out or any(w <= 0 or h <= 0 for w, h in out):
        raise ValueError(f"image_grid_pinpoints {value!r}: expected a non-empty list of positive (width, height)")
    return out


def select_best_resolution(image_size: tuple[int, int], candidates: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """The candidate keeping the most image pixels when the image is fitted inside it; ties: least padding."""
    width, height = image_size
    best, best_effective, best_wasted = candidates[0], -1, math.inf
    for cw, ch in candidates:
        scale = min(cw / width, ch / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        wasted = cw * ch - effective
        if effective > best_effective or (effective == best_effective and wasted < best_wasted):
            best, best_effective, best_wasted = (cw, ch), effective, wasted
    return best


def resize_and_pad(image: Image.Image, target: tuple[int, int]) -> Image.Image:
    """Fit the image inside ``target`` (aspect kept, bicubic), centred on black."""
    width, height = image.size
    tw, th = target
    if tw / width < th / height:
        new_w, new_h = tw, min(math.ceil(height * tw / width), th)
    else:
        new_w, new_h = min(math.ceil(width * th / height), tw), th
    canvas = Image.new("RGB", (tw, th), (0, 0, 0))
    canvas.paste(image.resize((new_w, new_h), Image.Resampling.BICUBIC), ((tw - new_w) // 2, (th - new_h) // 2))
    return canvas


def pad_to_square(image: Image.Image, mean: Sequence[float]) -> Image.Image:
    """Centre the image on a square of the mean colour (LLaVA's ``expand2square``)."""
    width, height = image.size
    if width == height:
        return image
    side = max(width, height)
    canvas = Image.new("RGB", (side, side), tuple(int(m * 255) for m in mean))
    canvas.paste(image, ((side - width) // 2, (side - height) // 2))
    return canvas


def split_tiles(image: Image.Image, tile: int) -> list[Image.Image]:
    """Row-major ``tile`` x ``tile`` crops of an image whose sides are multiples of ``tile``."""
    width, height = image.size
    return [image.crop((x, y, x + tile, y + tile)) for y in range(0, height, tile) for x in range(0, width, tile)]


def normalize_tiles(tiles: Sequence[Image.Image], cfg: AnyResConfig) -> torch.Tensor:
    """[N, 3, tile, tile] float32: bicubic resize to the tile size if needed, scale to [0, 1], then mean/std."""
    side = cfg.tile_size
    arrays = [
        np.asarray((t if t.size == (side, side) else t.resize((side, side), Image.Resampling.BICUBIC)).convert("RGB"))
        for t in tiles
    ]
    x = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).to(torch.float32) / 255.0
    mean = torch.tensor(cfg.image_mean, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(cfg.image_std, dtype=torch.float32).view(1, 3, 1, 1)
    return (x - mean) / std


@dataclass(frozen=True)
class ProcessedImage:
    """One image ready for the vision tower.

    pixel_values: [1 + rows*cols, 3, tile, tile] (overview tile first, then the grid row-major) for anyres,
    [1, 3, tile, tile] otherwise. image_size: the original (width, height), needed to unpad the features.
    grid: (cols, rows) of the chosen grid resolution ((1, 1) without anyres).
    """

    pixel_values: torch.Tensor
    image_size: tuple[int, int]
    grid: tuple[int, int]

    @property
    def num_tiles(self) -> int:
        return self.pixel_values.shape[0]


def preprocess_image(image: Image.Image, cfg: AnyResConfig) -> ProcessedImage:
    """Pixel tiles for one image, as LLaVA-OneVision's ``process_anyres_image`` builds them."""
    if not isinstance(image, Image.Image):
        raise TypeError(f"expected a PIL.Image.Image, got {type(image).__name__}")
    if image.width < 1 or image.height < 1:
        raise ValueError(f"image size {image.size} is empty")
    image = image.convert("RGB")
    if cfg.aspect_ratio == "pad":
        return ProcessedImage(normalize_tiles([pad_to_square(image, cfg.image_mean)], cfg), image.size, (1, 1))
    if not cfg.is_anyres:
        return ProcessedImage(normalize_tiles([image], cfg), image.size, (1, 1))
    best = select_best_resolution(image.size, cfg.grid_pinpoints)
    tiles = split_tiles(resize_and_pad(image, best), cfg.tile_size)
    overview = image.resize((cfg.tile_size, cfg.tile_size), Image.Resampling.BICUBIC)
    grid = (best[0] // cfg.tile_size, best[1] // cfg.tile_size)
    return ProcessedImage(normalize_tiles([overview, *tiles], cfg), image.size, grid)


def unpad_bounds(feat_h: int, feat_w: int, image_size: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of the grid feature map [feat_h, feat_w] that covers the image, not its padding."""
    width, height = image_size
    if width / height > feat_w / feat_h:  # padding was added above and below
        new_h = int(height * (feat_w / width))
        pad = (feat_h - new_h) // 2
        return pad, feat_h - pad, 0, feat_w
    new_w = int(width * (feat_h / height))
    pad = (feat_w - new_w) // 2
    return 0, feat_h, pad, feat_w - pad


def shrunk_size(h: int, w: int, unit: int, max_tiles: int | None) -> tuple[int, int] | None:
    """anyres_max: the (h, w) to bilinearly resize an unpadded h x w feature map to, or None to keep it."""
    if max_tiles is None:
        return None
    times = math.sqrt(h * w / (max_tiles * unit**2))
    if times <= 1.1:
        return None
    return int(h // times), int(w // times)


def merged_grid_shape(image_size: tuple[int, int], grid: tuple[int, int], cfg: AnyResConfig) -> tuple[int, int]:
    """(rows, cols) of the grid feature map after unpadding and anyres_max shrinking (before newlines)."""
    unit = cfg.features_per_side
    feat_h, feat_w = grid[1] * unit, grid[0] * unit
    top, bottom, left, right = unpad_bounds(feat_h, feat_w, image_size)
    h, w = bottom - top, right - left
    return shrunk_size(h, w, unit, cfg.max_tiles) or (h, w)


def image_token_count(image_size: tuple[int, int], cfg: AnyResConfig) -> int:
    """Number of embeddings one image of (width, height) contributes to the language model's input."""
    base = cfg.features_per_side**2
    if not cfg.is_anyres:
        return base
    grid = select_best_resolution(image_size, cfg.grid_pinpoints)
    grid = (grid[0] // cfg.tile_size, grid[1] // cfg.tile_size)
    if cfg.merge_type == "flat":
        return base * (1 + grid[0] * grid[1])
    rows, cols = merged_grid_shape(image_size, grid, cfg)
    return base + rows * (cols + 1)
