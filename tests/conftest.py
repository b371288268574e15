"""Shared fixtures: random-weight tiny checkpoints in the real LLaDA and Dream formats."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dllm_bench.models.tiny_format import make_random_checkpoint

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_llada_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LLaDA-format checkpoint (OLMo tensor names, LLaDA chat template), 2 layers, d_model 64."""
    return make_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_llada", "llada", seed=0)


@pytest.fixture(scope="session")
def tiny_dream_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dream-format checkpoint (Qwen2 tensor names, GQA 4/2 heads, q/k/v biases), 2 layers, d_model 64."""
    return make_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_dream", "dream", seed=1)
