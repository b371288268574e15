"""``DiffusionLM.forward(query_positions=...)``: a forward at per-row canvas positions against a filled K/V cache
computes what the full forward computes there when the cache is current, equals the span forward when the
positions are a span, writes exactly those positions' K/V, and leaves the span path as it was."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.models import load_model
from dllm_bench.models.cache import KVCache


@pytest.fixture(scope="module", params=["llada", "dream"])
def net(request, tiny_llada_dir, tiny_dream_dir):
    return load_model(tiny_llada_dir if request.param == "llada" else tiny_dream_dir, device="cpu")


def _canvas(net, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two left-padded rows: a prompt of random ids, then 10 answer slots, some masked."""
    g = torch.Generator().manual_seed(seed)
    high = min(net.config.mask_token_id, 90)
    ids = torch.randint(0, high, (2, 16), generator=g)
    ids[:, 10:][torch.rand(2, 6, generator=g) < 0.5] = net.config.mask_token_id
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = net.config.pad_token_id
    return ids, mask


# per-row query positions, ascending; with Dream's shifted logits each logit's source (i - 1) is a query too
QUERIES = torch.tensor([[9, 10, 11, 13, 14], [11, 12, 13, 14, 15]])


def test_positions_against_a_current_cache_equal_the_full_forward(net):
    ids, mask = _canvas(net)
    with torch.no_grad():
        full = net(ids, attention_mask=mask)
        kv = KVCache()
        net(ids, attention_mask=mask, cache=kv)
        queries = ids.gather(1, QUERIES)
        if net.config.shift_logits:  # logits only where the source i - 1 is a query: 10, 11, 14 and 12..15
            rows, pos = torch.tensor([0, 0, 0, 1, 1, 1, 1]), torch.tensor([10, 11, 14, 12, 13, 14, 15])
            got = net(queries, attention_mask=mask, cache=kv, query_positions=QUERIES, logits_at=(rows, pos))
            want = full[rows, pos]
        else:
            got = net(queries, attention_mask=mask, cache=kv, query_positions=QUERIES)
            want = full.gather(1, QUERIES[..., None].expand(-1, -1, full.shape[-1]))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_shifted_logit_without_its_source_is_refused(net):
    if not net.config.shift_logits:
        pytest.skip("only Dream's logits come from the position before")
    ids, mask = _canvas(net)
    with torch.no_grad():
        kv = KVCache()
        net(ids, attention_mask=mask, cache=kv)
        with pytest.raises(ValueError, match="source position"):
            net(ids.gather(1, QUERIES), attention_mask=mask, cache=kv, query_positions=QUERIES)


def test_positions_of_a_span_equal_the_span_forward(net):
    ids, mask = _canvas(net, seed=1)
    with torch.no_grad():
        kv_a, kv_b = KVCache(), KVCache()
        net(ids, attention_mask=mask, cache=kv_a)
        net(ids, attention_mask=mask, cache=kv_b)
        changed = ids.clone()
        changed[:, 11] = 7  # a committed token: the stored K/V elsewhere are now stale, alike in both caches
        rows, pos = torch.tensor([0, 0, 1]), torch.tensor([12, 15, 13])
        # Dream: a span forward starting at 10 also runs 9, read-only, so the K/V written are 10..15's in both
        lo = 10 if net.config.shift_logits else 11
        span = torch.arange(lo, 16).expand(2, -1)
        span_logits = net(changed[:, lo:], attention_mask=mask, cache=kv_a, start=lo, logits_at=(rows, pos))
        got = net(changed.gather(1, span), attention_mask=mask, cache=kv_b, query_positions=span, logits_at=(rows, pos))
    torch.testing.assert_close(got, span_logits, atol=1e-5, rtol=1e-5)


def test_positions_write_only_their_keys_and_values(net):
    ids, mask = _canvas(net, seed=2)
    with torch.no_grad():
        kv = KVCache()
        net(ids, attention_mask=mask, cache=kv)
        before = [k.clone() for k in kv.keys]
        changed = ids.clone()
        changed[:, 9:] = 5
        net(changed.gather(1, QUERIES), attention_mask=mask, cache=kv, query_positions=QUERIES,
            logits_at=(torch.tensor([0]), torch.tensor([10])))  # a logit with its source a query (Dream)
    written = torch.zeros(2, 16, dtype=torch.bool)
    written.scatter_(1, QUERIES, True)
    for old, new in zip(before, kv.keys):
        assert torch.equal(old.transpose(1, 2)[~written], new.transpose(1, 2)[~written])
        assert not torch.equal(old.transpose(1, 2)[written], new.transpose(1, 2)[written])
    assert torch.equal(kv.ids, torch.where(written, changed, ids))


def test_positions_are_refused_without_a_filled_cache(net):
    ids, mask = _canvas(net)
    with pytest.raises(ValueError, match="need a filled cache"):
        net(ids[:, :4], attention_mask=mask, cache=KVCache(), query_positions=torch.arange(4).expand(2, -1))
