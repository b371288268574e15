"""Block diffusion's switches in the network: block ids and the block-causal mask against independent loops, the
full-attention path untouched, and the committed-block K/V cache equal to recomputing the whole canvas under the
block-causal mask (float32 to rounding, bf16 to its rounding), shifted and unshifted, absolute and anchored grids."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dllm_bench.models import DiffusionLM, ModelConfig
from dllm_bench.models.blocks import block_causal_mask, block_ids
from dllm_bench.models.cache import CommittedBlockCache
from dllm_bench.models.config import ModelConfigError


def _config(flavour: str = "llada", **over) -> ModelConfig:
    base = dict(flavour=flavour, vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, mlp_hidden_size=48,
                rope_theta=1e4, rms_norm_eps=1e-6, mask_token_id=63, eos_token_id=1, pad_token_id=1,
                qkv_bias=flavour == "dream", attention="block_causal", block_size=4)
    return ModelConfig(**{**base, **over})


def _model(cfg: ModelConfig, dtype: torch.dtype = torch.float32) -> DiffusionLM:
    torch.manual_seed(0)
    model = DiffusionLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model.to(dtype).eval()


# ---------------------------------------------------------------- block ids and the mask


def test_block_ids_absolute_and_anchored_equal_a_position_by_position_statement():
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [0, 0, 0, 1, 2, 3, 4, 5, 6, 7]])
    want_abs = [[p // 3 for p in row] for row in pos.tolist()]
    assert block_ids(pos, 3).tolist() == want_abs
    anchors = [4, 2]
    want_anc = [[0 if p < a else 1 + (p - a) // 3 for p in row] for row, a in zip(pos.tolist(), anchors)]
    assert block_ids(pos, 3, "anchored", torch.tensor(anchors)).tolist() == want_anc
    assert block_ids(pos, 3, "anchored", 4)[0].tolist() == want_anc[0]


def test_block_causal_mask_equals_a_loop():
    qb, kb = torch.tensor([[0, 1, 1, 2]]), torch.tensor([[0, 0, 1, 1, 2, 3]])
    want = [[[kb[0, j] <= qb[0, i] for j in range(6)] for i in range(4)]]
    assert block_causal_mask(qb, kb).tolist() == torch.tensor(want).tolist()


@pytest.mark.parametrize("bad,match", [(dict(attention="sliding"), "attention"), (dict(block_grid="relative"), "block_grid"),
                                       (dict(block_size=0), "block_size")])
def test_config_refuses_bad_switches_in_one_line(bad, match):
    with pytest.raises(ModelConfigError, match=match) as err:
        _config(**bad)
    assert "\n" not in str(err.value)


def test_prediction_shift_is_a_switch_with_the_flavour_as_default():
    assert _config("dream").shift_logits and not _config("llada").shift_logits
    assert _config("llada", predicts_next=True).shift_logits and not _config("dream", predicts_next=False).shift_logits


def test_full_attention_is_the_default_and_refuses_a_block_anchor():
    cfg = dataclasses.replace(_config(), attention="full", block_size=0)
    assert ModelConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(ModelConfig)
                          if f.name not in ("attention", "block_size")}).attention == "full"
    with pytest.raises(ValueError, match="block_anchor"):
        _model(cfg)(torch.zeros(1, 4, dtype=torch.long), block_anchor=2)


def test_block_causal_attention_equals_an_explicit_pair_mask_and_one_block_equals_full_attention():
    """The switch builds the mask the published eval code builds (``block_q >= block_kv``): equal to giving that
    mask by hand to the full-attention network; and with one block covering the canvas it is full attention."""
    ids = torch.randint(0, 60, (2, 11), generator=torch.Generator().manual_seed(1))
    block = _model(_config())
    full = _model(dataclasses.replace(_config(), attention="full", block_size=0))
    blocks = torch.arange(11) // 4
    pair = (blocks[:, None] >= blocks[None, :]).expand(2, 11, 11)
    with torch.no_grad():
        assert torch.equal(block(ids), full(ids, query_key_mask=pair))
        one_block = _model(_config(block_size=16))
        torch.testing.assert_close(one_block(ids), full(ids), rtol=1e-6, atol=1e-6)
        assert (block(ids) - full(ids)).abs().max() > 1e-2  # the mask matters


# ---------------------------------------------------------------- the committed-block cache


def _decode_blocks(model: DiffusionLM, ids: torch.Tensor, bounds: list[int], **kw) -> list[torch.Tensor]:
    """Commit [0, bounds[0]) then each block; return the logits of every block computed from the committed prefix."""
    cache = CommittedBlockCache()
    cache.commit_next()
    model(ids[:, : bounds[0]], cache=cache, **kw)
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        out.append(model(ids[:, lo:hi], cache=cache, start=lo, **kw))  # a denoising step: reads, writes nothing
        assert cache.length == lo
        cache.commit_next()
        model(ids[:, lo:hi], cache=cache, start=lo, **kw)  # the block is finished: append its K/V
        assert cache.length == hi
    return out


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_committed_block_cache_equals_recomputing_the_canvas(flavour, dtype, tol):
    model = _model(_config(flavour), dtype)
    ids = torch.randint(0, 60, (3, 20), generator=torch.Generator().manual_seed(2))
    bounds = [8, 12, 16, 20]
    with torch.no_grad():
        full = model(ids)
        for (lo, hi), got in zip(zip(bounds, bounds[1:]), _decode_blocks(model, ids, bounds)):
            assert got.dtype == dtype
            torch.testing.assert_close(got.float(), full[:, lo:hi].float(), rtol=tol, atol=tol)


def test_committed_block_cache_on_an_anchored_grid_with_per_row_anchors():
    """D2F's grid: the prompt is one block; generated blocks start at each row's prompt end (position ids)."""
    model = _model(_config(block_grid="anchored"))
    ids = torch.randint(0, 60, (2, 14), generator=torch.Generator().manual_seed(3))
    anchor = torch.tensor([6, 6])
    with torch.no_grad():
        full = model(ids, block_anchor=anchor)
        got = _decode_blocks(model, ids, [6, 10, 14], block_anchor=anchor)
        torch.testing.assert_close(got[0], full[:, 6:10], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[1], full[:, 10:14], rtol=1e-5, atol=1e-5)
        assert (full - model(ids, block_anchor=torch.tensor([4, 4]))).abs().max() > 1e-3  # the anchor matters


def test_a_denoising_step_never_changes_the_committed_prefix():
    model = _model(_config("dream"))
    ids = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(4))
    cache = CommittedBlockCache()
    cache.commit_next()
    with torch.no_grad():
        model(ids[:, :8], cache=cache)
        keys = [k.clone() for k in cache.keys]
        first = model(ids[:, 8:12], cache=cache, start=8)
        other = ids[:, 8:12].flip(1)
        model(other, cache=cache, start=8)
        assert all(torch.equal(a, b) for a, b in zip(keys, cache.keys)) and cache.length == 8
        torch.testing.assert_close(model(ids[:, 8:12], cache=cache, start=8), first, rtol=0, atol=0)


def test_the_cache_refuses_a_span_that_does_not_continue_the_prefix():
    model = _model(_config())
    cache = CommittedBlockCache()
    cache.commit_next()
    ids = torch.zeros(1, 8, dtype=torch.long)
    with torch.no_grad():
        model(ids[:, :4], cache=cache)
        with pytest.raises(RuntimeError, match="committed end"):
            model(ids[:, 4:8], cache=cache, start=5)


def test_the_open_block_equals_recomputing_while_its_tokens_are_unchanged_and_commits_whole():
    """Fast-dLLM v2's sub-block cache: the open block's stored K/V plus a sub-block's fresh ones equal the canvas
    recomputed (the block's tokens unchanged); a commit covers the whole open block and closes it."""
    model = _model(_config("dream", block_size=8))
    ids = torch.randint(0, 60, (2, 24), generator=torch.Generator().manual_seed(5))
    cache = CommittedBlockCache()
    with torch.no_grad():
        full = model(ids)
        cache.commit_next()
        model(ids[:, :8], cache=cache)
        cache.open_block()
        torch.testing.assert_close(model(ids[:, 8:16], cache=cache, start=8), full[:, 8:16], rtol=1e-5, atol=1e-5)
        for lo in (8, 12):  # sub-blocks of 4: the first one's first logit comes from the committed position 7
            torch.testing.assert_close(model(ids[:, lo:lo + 4], cache=cache, start=lo), full[:, lo:lo + 4],
                                       rtol=1e-5, atol=1e-5)
        assert (cache.committed, cache.length) == (8, 16)
        cache.commit_next()
        with pytest.raises(RuntimeError, match="whole open block"):
            model(ids[:, 8:12], cache=cache, start=8)
        cache.commit_next()
        model(ids[:, 8:16], cache=cache, start=8)
        assert (cache.committed, cache.length, cache.open_keys) == (16, 16, [])
        torch.testing.assert_close(model(ids[:, 16:24], cache=cache, start=16), full[:, 16:24], rtol=1e-5, atol=1e-5)


def test_raw_logits_are_the_unshifted_states():
    """A shifted model's raw logits at i are its own state's (its prediction of token i + 1): the shifted logits at
    i + 1; an unshifted model's raw logits are its logits."""
    ids = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(6))
    dream, llada = _model(_config("dream")), _model(_config("llada"))
    with torch.no_grad():
        shifted, raw = dream(ids), dream(ids, raw_logits=True)
        assert torch.equal(raw[:, :-1], shifted[:, 1:]) and not torch.equal(raw, shifted)
        assert torch.equal(llada(ids, raw_logits=True), llada(ids))


def test_the_canvas_kv_cache_carries_the_block_causal_mask():
    """The existing whole-canvas K/V cache (Fast-dLLM's prefix / dual cache) on a block-causal model: a span's
    forward over fresh stored keys equals the full forward (the mask follows each query's block)."""
    from dllm_bench.models.cache import KVCache

    model = _model(_config("dream"))
    ids = torch.randint(0, 60, (2, 16), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache()
        model(ids, cache=cache)
        torch.testing.assert_close(model(ids[:, 6:10], cache=cache, start=6), full[:, 6:10], rtol=1e-5, atol=1e-5)
        query = torch.tensor([[2, 3], [8, 9]])  # per-row positions (a shifted logit's source is a query too)
        got = model(ids.gather(1, query), cache=cache, query_positions=query,
                    logits_at=(torch.tensor([0, 1]), torch.tensor([3, 9])))
        torch.testing.assert_close(got, full[torch.tensor([0, 1]), torch.tensor([3, 9])], rtol=1e-5, atol=1e-5)
