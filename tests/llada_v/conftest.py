"""Fixtures for LLaDA-V: a tiny random checkpoint in the real format and synthetic PNG images."""

from __future__ import annotations

from pathlib import Path

import pytest
from llada_v_images import write_png

from dllm_bench.models import load_model
from dllm_bench.models.llada_v import LLaDAV, make_random_llada_v_checkpoint


@pytest.fixture(scope="session")
def tiny_llada_v_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LLaDA-V format: LLaMA-style LLaDA (2 layers, d 64) + 3-layer SigLIP on 28 px tiles + mlp2x_gelu."""
    return make_random_llada_v_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_llada_v", seed=0)


@pytest.fixture(scope="session")
def tiny_llada_v(tiny_llada_v_dir: Path) -> LLaDAV:
    model = load_model(tiny_llada_v_dir, dtype="float32", device="cpu")
    assert isinstance(model, LLaDAV)
    return model


@pytest.fixture(scope="session")
def png_images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Synthetic PNGs of varied aspect ratios (wide, tall, square, tiny, large) for the 28 px test tower."""
    d = tmp_path_factory.mktemp("images")
    sizes = [(60, 40), (30, 90), (28, 28), (13, 7), (170, 120)]
    return [write_png(d / f"img_{i}.png", w, h, seed=i) for i, (w, h) in enumerate(sizes)]
