"""Runner test helpers: compose the real Hydra config with overrides, on random tiny checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from dllm_bench.runner.config import CONF_DIR, register_resolvers

register_resolvers()


def compose_config(*overrides: str) -> DictConfig:
    """The app's config as `dllm-bench <overrides>` would see it."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=False)


@pytest.fixture()
def compose_cfg():
    """`compose(*overrides)` -> the composed DictConfig."""
    return compose_config


@pytest.fixture()
def llada_overrides(tiny_llada_dir: Path, tmp_path: Path) -> list[str]:
    """Overrides for a random tiny LLaDA on sudoku, results under tmp_path."""
    return [f"model.name_or_path={tiny_llada_dir}", f"output_dir={tmp_path / 'results'}", "progress=false",
            "num_threads=1"]
