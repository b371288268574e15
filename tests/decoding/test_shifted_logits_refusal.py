"""The policies that rewrite a token from the prediction at its own position declare it (``unshifted_logits``) and
refuse models with shifted logits (Dream) in one line, before any forward."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.decoding import build_policy
from dllm_bench.decoding.config import POLICIES

from .conftest import prompts_for
from .spec_kwargs import spec_generate

DECLARED = sorted(name for name, cls in POLICIES.items() if cls.unshifted_logits)


def test_the_editing_decoders_declare_it():
    assert {"dmax", "llada21"} <= set(DECLARED)


@pytest.mark.parametrize("name", DECLARED)
def test_dream_models_are_refused(dream, name):
    with pytest.raises(ValueError, match="shifted logits"):
        spec_generate(dream, torch.tensor([prompts_for(dream, (5,))[0]]), None, gen_length=16, block_length=8,
                      policy=build_policy(name))
