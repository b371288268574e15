"""Fixtures for engine tests: the tiny random checkpoints with sharpened logits, and left-padded prompts."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.models import load_model


class SharpenedNetwork:
    """The real network with logits scaled up, so random weights give varied, peaked confidences.

    Same call signature as the network (the engine treats any such callable as a model), including its LM head
    at the candidates (``logits_at``) and on their window (``logits_range``), so engine tests run the real
    network's head paths.
    """

    accepts_logits_range = True
    accepts_logits_at = True

    def __init__(self, model, scale: float = 20.0):
        self.model, self.scale, self.config, self.tokenizer = model, scale, model.config, model.tokenizer

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        return self.model(*args, **kwargs) * self.scale


@pytest.fixture(scope="module")
def llada(tiny_llada_dir):
    return SharpenedNetwork(load_model(tiny_llada_dir, device="cpu"))


@pytest.fixture(scope="module")
def dream(tiny_dream_dir):
    return SharpenedNetwork(load_model(tiny_dream_dir, device="cpu"))


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded batch and its attention mask."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask


def prompts_for(model, lengths=(9, 5, 12), seed=0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    low = 0
    high = min(model.config.mask_token_id, 90)
    return [torch.randint(low, high, (n,), generator=g).tolist() for n in lengths]
