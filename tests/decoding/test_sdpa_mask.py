"""No attention mask reaches SDPA when a batch has no padding (so Flash is eligible on a GPU); a padded batch
passes its mask; and an all-True mask gives the same bits as none."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dllm_bench.decoding import DecodeSpec, Decoding, build_cache, build_policy, build_rule, generate
from dllm_bench.models.cache import KVCache

from .conftest import left_pad, prompts_for


@pytest.fixture
def sdpa_masks(monkeypatch):
    """The attn_mask of every SDPA call (None or a tensor)."""
    seen = []
    real = F.scaled_dot_product_attention

    def recording(*args, attn_mask=None, **kwargs):
        seen.append(attn_mask)
        return real(*args, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    return seen


def _spec(cache: str) -> DecodeSpec:
    return DecodeSpec(Decoding(16, 8, build_policy("blocks"), build_rule("threshold", threshold=0.9), build_cache(cache)))


@pytest.mark.parametrize("cache", ["none", "prefix", "dual", "dllm"])
def test_sdpa_gets_no_mask_without_padding_and_the_mask_with_it(llada, sdpa_masks, cache):
    ids, mask = left_pad(prompts_for(llada, (9, 5)), llada.config.pad_token_id)
    with torch.no_grad():
        alone = generate(llada, ids[:1], mask[:1], _spec(cache))  # batch 1, an all-ones mask given
    assert sdpa_masks and all(m is None for m in sdpa_masks)
    sdpa_masks.clear()
    with torch.no_grad():
        batched = generate(llada, ids, mask, _spec(cache))  # row 1 is padded
    assert sdpa_masks and all(isinstance(m, torch.Tensor) and m.dtype == torch.bool for m in sdpa_masks)
    assert torch.equal(batched.tokens[0], alone.tokens[0])


@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_an_all_true_mask_gives_the_bits_of_none(request, flavour):
    model = request.getfixturevalue(flavour).model
    x = torch.randint(0, 90, (2, 24), generator=torch.Generator().manual_seed(0))
    ones = torch.ones_like(x)
    with torch.no_grad():
        assert torch.equal(model(x, attention_mask=ones), model(x, attention_mask=None))
        kv_mask, kv_none = KVCache(), KVCache()
        model(x, attention_mask=ones, cache=kv_mask)
        model(x, attention_mask=None, cache=kv_none)
        assert torch.equal(model(x[:, 8:16], attention_mask=ones, cache=kv_mask, start=8),
                           model(x[:, 8:16], attention_mask=None, cache=kv_none, start=8))
