"""Shared fixtures: random-weight tiny checkpoints in the real LLaDA and Dream formats."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from dllm_bench.models.tiny_format import make_random_checkpoint

SUITE_THREADS = 2  # the count every golden was recorded at; a CPU product's bits can depend on it
torch.set_num_threads(SUITE_THREADS)
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(autouse=True)
def _suite_threads():
    """Each test starts at the suite's thread count: an in-process run picks its own (runner/threads.py) and
    would otherwise leave it to the tests after it."""
    if torch.get_num_threads() != SUITE_THREADS:
        torch.set_num_threads(SUITE_THREADS)


@pytest.fixture(scope="session")
def load_script() -> Callable[[str], ModuleType]:
    """Import `scripts/<name>.py` as a module (scripts/ is not a package)."""

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"script_{name}", SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def tiny_llada_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LLaDA-format checkpoint (OLMo tensor names, LLaDA chat template), 2 layers, d_model 64."""
    return make_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_llada", "llada", seed=0)


@pytest.fixture(scope="session")
def tiny_dream_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dream-format checkpoint (Qwen2 tensor names, GQA 4/2 heads, q/k/v biases), 2 layers, d_model 64."""
    return make_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_dream", "dream", seed=1)
