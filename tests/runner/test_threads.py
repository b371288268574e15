"""The run's thread count: the config's when set, else 1 for a small local checkpoint, every CPU otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from dllm_bench.runner.threads import SMALL_MODEL_BYTES, pick_num_threads, weight_bytes

pytestmark = pytest.mark.fast  # the inner loop: make test-fast

EMBEDDED = Path(__file__).resolve().parents[2] / "dllm_bench" / "tiny" / "checkpoints"


def test_embedded_models_run_on_one_thread():
    for name in ("tiny_llada", "tiny_dream"):
        assert 0 < weight_bytes(str(EMBEDDED / name)) < SMALL_MODEL_BYTES
        assert pick_num_threads(None, str(EMBEDDED / name), cpus=16) == 1


def test_large_or_hub_models_use_every_cpu(tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "model.safetensors", "wb") as f:  # sparse: the size without the bytes
        f.truncate(SMALL_MODEL_BYTES)
    assert pick_num_threads(None, str(big), cpus=16) == 16
    assert weight_bytes("GSAI-ML/LLaDA-8B-Instruct") is None
    assert pick_num_threads(None, "GSAI-ML/LLaDA-8B-Instruct", cpus=4) == 4


def test_the_config_wins():
    assert pick_num_threads(3, str(EMBEDDED / "tiny_llada"), cpus=16) == 3
