"""Synthetic PNG images for the LLaDA-V tests (generated, never downloaded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def write_png(path: Path, width: int, height: int, seed: int) -> Path:
    """A random-noise RGB PNG of the given size (smooth gradient + noise, so tiles differ)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 255 // max(width - 1, 1), yy * 255 // max(height - 1, 1), (xx + yy) % 256], axis=-1)
    noise = rng.integers(0, 64, size=(height, width, 3))
    Image.fromarray(((base + noise) % 256).astype(np.uint8)).save(path, format="PNG")
    return path
