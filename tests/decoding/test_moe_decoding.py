"""The decoding engine on LLaDA-MoE (tiny random checkpoint): each cache runs on the MoE layers."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.decoding import build_cache, build_policy, build_rule
from dllm_bench.models import load_model
from dllm_bench.models.tiny_moe import make_random_moe_checkpoint

from .spec_kwargs import spec_generate


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return make_random_moe_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_moe", seed=0)


@pytest.mark.parametrize("kind", ["prefix", "dual", "dllm"])
def test_engine_decodes_the_moe_model_with_each_cache(moe_dir, kind):
    model = load_model(moe_dir, device="cpu")
    ids = torch.randint(0, 90, (1, 9), generator=torch.Generator().manual_seed(2))
    cache = build_cache(kind) if kind != "dllm" else build_cache("dllm", prompt_interval=2, response_interval=2,
                                                                   verify_ratio=0.25)
    out = spec_generate(model, ids, torch.ones_like(ids), gen_length=16, block_length=8,
                        policy=build_policy("blocks", steps=8), rule=build_rule("topk"), cache=cache)
    assert out.tokens.shape == (1, 16) and not (out.tokens == model.config.mask_token_id).any()
    assert out.records[0].nfe == 8
    if kind == "dllm":  # every forward refreshing everything is the no-cache decode
        plain = spec_generate(model, ids, torch.ones_like(ids), gen_length=16, block_length=8,
                              policy=build_policy("blocks", steps=8), rule=build_rule("topk"))
        full = spec_generate(model, ids, torch.ones_like(ids), gen_length=16, block_length=8,
                             policy=build_policy("blocks", steps=8), rule=build_rule("topk"),
                             cache=build_cache("dllm", prompt_interval=1, response_interval=1))
        assert full.tokens.tolist() == plain.tokens.tolist()
