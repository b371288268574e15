"""The benchmark scripts' random-weight builder: the documented initialisation, and the same weights per seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import dllm_bench.models
from dllm_bench.models.random_weights import random_network

DREAM = Path(dllm_bench.models.__file__).parent / "reference_configs" / "dream-v0-base-7b" / "config.json"
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 1000, "mask_token_id": 999, "pad_token_id": 998,
         "bos_token_id": 998, "eos_token_id": 998}


@pytest.fixture(scope="module")
def raw() -> dict:
    """Dream's real config (q/k/v biases, grouped-query attention) at a small size."""
    return {**json.loads(DREAM.read_text()), **SMALL}


def test_matrices_normal_norms_one_biases_zero(raw):
    model = random_network(raw, "random-dream", torch.device("cpu"), torch.float32)
    params = dict(model.named_parameters())
    biases = [n for n in params if n.endswith("bias")]
    norms = [n for n, p in params.items() if p.dim() == 1 and not n.endswith("bias")]
    assert biases and norms and not model.training
    assert all(torch.equal(params[n], torch.zeros_like(params[n])) for n in biases)
    assert all(torch.equal(params[n], torch.ones_like(params[n])) for n in norms)
    matrices = torch.cat([p.flatten() for p in params.values() if p.dim() > 1])
    assert abs(matrices.mean().item()) < 1e-3 and abs(matrices.std().item() - 0.02) < 1e-3


def test_a_seed_gives_the_same_weights_and_another_seed_others(raw):
    def weights(seed: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        return random_network(raw, "random-dream", torch.device("cpu"), dtype, seed=seed).state_dict()

    first, again, other = weights(0), weights(0), weights(1)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["lm_head.weight"], other["lm_head.weight"])
    assert weights(0, torch.bfloat16)["lm_head.weight"].dtype == torch.bfloat16
