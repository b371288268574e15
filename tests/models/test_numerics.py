"""The network against a deliberately naive reference, and the invariances decoding relies on."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from dllm_bench.models import DiffusionLM, FeatureCache, KVCache, load_model

pytestmark = pytest.mark.golden  # bit equality between code paths: checked under every kernel width


def naive_logits(model: DiffusionLM, ids: list[int]) -> torch.Tensor:
    """Explicit per-head attention and explicit RoPE over one unpadded sequence, straight from the state dict."""
    cfg = model.config
    sd = {k: v.double() for k, v in model.state_dict().items()}
    olmo = cfg.tensor_naming == "olmo"

    def w(layer: int | None, olmo_name: str, llama_name: str) -> torch.Tensor | None:
        if layer is None:
            return sd.get(olmo_name if olmo else llama_name)
        key = f"model.transformer.blocks.{layer}.{olmo_name}" if olmo else f"model.layers.{layer}.{llama_name}"
        return sd.get(key)

    def rms(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
        return g * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)

    def rope(vec: torch.Tensor, pos: int) -> torch.Tensor:
        d = vec.shape[0]
        out = vec.clone()
        for j in range(d // 2):
            theta = pos / cfg.rope_theta ** (2 * j / d)
            a, b = vec[j], vec[j + d // 2]
            out[j] = a * math.cos(theta) - b * math.sin(theta)
            out[j + d // 2] = b * math.cos(theta) + a * math.sin(theta)
        return out

    t, hd, nh, nkv = len(ids), cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    x = w(None, "model.transformer.wte.weight", "model.embed_tokens.weight")[ids]
    for i in range(cfg.n_layers):
        h = rms(x, w(i, "attn_norm.weight", "input_layernorm.weight"), cfg.rms_norm_eps)

        def proj(o: str, ll: str, h: torch.Tensor = h, i: int = i) -> torch.Tensor:
            bias = w(i, o.replace("weight", "bias"), ll.replace("weight", "bias"))
            y = h @ w(i, o, ll).T
            return y + bias if bias is not None else y

        q = proj("q_proj.weight", "self_attn.q_proj.weight")
        k = proj("k_proj.weight", "self_attn.k_proj.weight")
        v = proj("v_proj.weight", "self_attn.v_proj.weight")
        heads = []
        for head in range(nh):
            kvh = head // (nh // nkv)
            qs = torch.stack([rope(q[p, head * hd : (head + 1) * hd], p) for p in range(t)])
            ks = torch.stack([rope(k[p, kvh * hd : (kvh + 1) * hd], p) for p in range(t)])
            vs = v[:, kvh * hd : (kvh + 1) * hd]
            scores = torch.tensor([[float(qs[a] @ ks[b]) / math.sqrt(hd) for b in range(t)] for a in range(t)])
            heads.append(torch.softmax(scores.double(), dim=-1) @ vs)  # no causal mask
        x = x + torch.cat(heads, dim=-1) @ w(i, "attn_out.weight", "self_attn.o_proj.weight").T
        h = rms(x, w(i, "ff_norm.weight", "post_attention_layernorm.weight"), cfg.rms_norm_eps)
        gate = h @ w(i, "ff_proj.weight", "mlp.gate_proj.weight").T
        up = h @ w(i, "up_proj.weight", "mlp.up_proj.weight").T
        x = x + (torch.nn.functional.silu(gate) * up) @ w(i, "ff_out.weight", "mlp.down_proj.weight").T
    x = rms(x, w(None, "model.transformer.ln_f.weight", "model.norm.weight"), cfg.rms_norm_eps)
    logits = x @ w(None, "model.transformer.ff_out.weight", "lm_head.weight").T
    if cfg.shift_logits:  # Dream: position i is predicted from hidden state i-1
        logits = torch.cat([logits[:1], logits[:-1]])
    return logits


@pytest.fixture(params=["llada", "dream"])
def tiny(request: pytest.FixtureRequest, tiny_llada_dir: Path, tiny_dream_dir: Path) -> DiffusionLM:
    return load_model(tiny_llada_dir if request.param == "llada" else tiny_dream_dir, device="cpu")


def _ids(model: DiffusionLM, text: str) -> list[int]:
    return model.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_logits_equal_naive_reference(tiny: DiffusionLM) -> None:
    ids = _ids(tiny, "The cat sat.") + [tiny.config.mask_token_id] * 3
    with torch.no_grad():
        got = tiny(torch.tensor([ids]))[0].double()
    ref = naive_logits(tiny, ids)
    assert got.shape == (len(ids), tiny.config.vocab_size)
    torch.testing.assert_close(got, ref, atol=2e-4, rtol=1e-4)


def test_attention_is_not_causal(tiny: DiffusionLM) -> None:
    ids = torch.tensor([_ids(tiny, "abcdefgh")])
    changed = ids.clone()
    changed[0, -1] = _ids(tiny, "z")[0]
    with torch.no_grad():
        a, b = tiny(ids), tiny(changed)
    assert not torch.allclose(a[0, 2], b[0, 2])  # an early position sees a later token


def test_padding_and_batch_composition_do_not_change_a_row(tiny: DiffusionLM) -> None:
    rows = [_ids(tiny, "short"), _ids(tiny, "a much longer prompt here"), _ids(tiny, "mid length")]
    width = max(map(len, rows)) + 4
    pad = tiny.config.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.no_grad():
        batch = tiny(ids, attention_mask=mask)
        for i, r in enumerate(rows):
            alone = tiny(torch.tensor([r]))[0]
            torch.testing.assert_close(batch[i, width - len(r) :], alone, atol=1e-5, rtol=1e-5)
            two = tiny(ids[[i, (i + 1) % 3]], attention_mask=mask[[i, (i + 1) % 3]])[0]
            torch.testing.assert_close(two, batch[i], atol=1e-5, rtol=1e-5)


def test_kv_cache_span_equals_full_forward(tiny: DiffusionLM) -> None:
    ids = torch.tensor([_ids(tiny, "prompt text") + [tiny.config.mask_token_id] * 8] * 2)
    mask = torch.ones_like(ids)
    s = ids.shape[1] - 8
    with torch.no_grad():
        full = tiny(ids, attention_mask=mask)
        kv = KVCache()
        torch.testing.assert_close(tiny(ids, attention_mask=mask, cache=kv), full)
        # prefix-cache step: [s, S); dual-cache step: a block [s, s + 4)
        torch.testing.assert_close(tiny(ids[:, s:], attention_mask=mask, cache=kv, start=s), full[:, s:], atol=1e-5, rtol=1e-5)
        blk = tiny(ids[:, s : s + 4], attention_mask=mask, cache=kv, start=s)
        torch.testing.assert_close(blk, full[:, s : s + 4], atol=1e-5, rtol=1e-5)
        part = tiny(ids[:, s:], attention_mask=mask, cache=kv, start=s, logits_range=(s + 2, s + 5))
        torch.testing.assert_close(part, full[:, s + 2 : s + 5], atol=1e-5, rtol=1e-5)
        # after a block token changes, the suffix K/V are stale (dual cache's approximation) until a refresh
        ids2 = ids.clone()
        ids2[:, s] = _ids(tiny, "x")[0]
        fresh = tiny(ids2, attention_mask=mask)
        step = tiny(ids2[:, s : s + 4], attention_mask=mask, cache=kv, start=s)
        assert not torch.allclose(step, fresh[:, s : s + 4], atol=1e-4)
        assert torch.equal(kv.token_ids(s, s + 1), ids2[:, s : s + 1])
        tiny(ids2, attention_mask=mask, cache=kv)  # refresh
        step = tiny(ids2[:, s : s + 4], attention_mask=mask, cache=kv, start=s)
        torch.testing.assert_close(step, fresh[:, s : s + 4], atol=1e-5, rtol=1e-5)


def test_kv_cache_refuses_a_span_before_a_full_forward(tiny: DiffusionLM) -> None:
    ids = torch.tensor([_ids(tiny, "abc")])
    with pytest.raises(RuntimeError, match="KV cache is empty"):
        tiny(ids[:, 1:], cache=KVCache(), start=1, attention_mask=torch.ones_like(ids))


def test_feature_cache_refresh_and_reuse_equal_full_forward(tiny: DiffusionLM) -> None:
    ids = torch.tensor([_ids(tiny, "the prompt") + [tiny.config.mask_token_id] * 6])
    p = ids.shape[1] - 6
    with torch.no_grad():
        full = tiny(ids)
        fc = FeatureCache(prompt_length=p)
        for plan in [(True, True, 0.0), (False, False, 0.0), (True, False, 0.0), (False, True, 0.0), (False, False, 0.5)]:
            fc.plan(*plan)
            torch.testing.assert_close(tiny(ids, cache=fc), full, atol=1e-5, rtol=1e-5)
        # after a response token changes: reuse is stale, a response refresh is closer (the prompt's deeper
        # features still saw the old token), a full refresh is exact
        ids2 = ids.clone()
        ids2[0, p + 1] = _ids(tiny, "q")[0]
        fresh = tiny(ids2)
        fc.plan(False, False, 0.0)
        stale_err = (tiny(ids2, cache=fc) - fresh)[0, p:].abs().max()
        fc.plan(False, True, 0.0)
        refreshed_err = (tiny(ids2, cache=fc) - fresh)[0, p:].abs().max()
        assert stale_err > 1e-3 and refreshed_err < stale_err
        fc.plan(True, True, 0.0)
        torch.testing.assert_close(tiny(ids2, cache=fc), fresh, atol=1e-5, rtol=1e-5)


def test_feature_cache_verify_recomputes_changed_tokens(tiny_llada_dir: Path) -> None:
    model = load_model(tiny_llada_dir, device="cpu")
    ids = torch.tensor([_ids(model, "the prompt") + [model.config.mask_token_id] * 8])
    p = ids.shape[1] - 8
    with torch.no_grad():
        fc = FeatureCache(prompt_length=p, refresh_layer0=False)
        fc.plan(True, True)
        model(ids, cache=fc)
        ids2 = ids.clone()
        ids2[0, p + 3] = _ids(model, "z")[0]
        fc.plan(False, False, verify_ratio=1 / 8)  # one token per layer: the changed one is least similar
        model(ids2, cache=fc)
        assert fc.recomputed_tokens == model.config.n_layers
        v_fresh = model.layers[0].value(model.embed(ids2))
        torch.testing.assert_close(fc.store[0]["v"][:, :, p:], v_fresh[:, :, p:])


def test_embed_override_replaces_marked_positions(tiny: DiffusionLM) -> None:
    ids = torch.tensor([_ids(tiny, "abcdef")])
    where = torch.zeros_like(ids, dtype=torch.bool)
    where[0, 2] = True
    embeds = torch.zeros(1, ids.shape[1], tiny.config.d_model)
    embeds[0, 2] = tiny.embed.weight[_ids(tiny, "z")[0]]
    swapped = ids.clone()
    swapped[0, 2] = _ids(tiny, "z")[0]
    with torch.no_grad():
        torch.testing.assert_close(tiny(ids, embed_override=(where, embeds)), tiny(swapped))


def test_logits_at_are_the_rows_of_the_head_over_the_span(tiny: DiffusionLM) -> None:
    """logits_at gives, bit for bit, the rows that the head over the whole span gives at those pairs: left-padded
    batch (Dream's predecessor rule at a row's first real token), under a KV cache (Dream's extra position
    before the span), and with fewer pairs than head_min_rows (padded with copies)."""
    rows = [_ids(tiny, "short"), _ids(tiny, "a much longer prompt here"), _ids(tiny, "mid")]
    width = max(map(len, rows)) + 6
    pad = tiny.config.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    first_real = [width - len(r) for r in rows]
    b = torch.tensor([0, 0, 1, 2, 2, 2, 1])
    pos = torch.tensor([first_real[0], width - 1, 3, first_real[2], width - 2, width - 1, width - 3])
    with torch.no_grad():
        full = tiny(ids, attention_mask=mask)
        assert len(b) < tiny.head_min_rows
        assert torch.equal(tiny(ids, attention_mask=mask, logits_at=(b, pos)), full[b, pos])
        many = torch.arange(3).repeat_interleave(width), torch.arange(width).repeat(3)
        assert torch.equal(tiny(ids, attention_mask=mask, logits_at=many), full.reshape(-1, full.shape[-1]))
        kv = KVCache()
        tiny(ids, attention_mask=mask, cache=kv)
        s = width - 4
        span = tiny(ids[:, s:], attention_mask=mask, cache=kv, start=s)
        at = torch.tensor([0, 1, 1, 2]), torch.tensor([s, s, s + 3, s + 1])
        got = tiny(ids[:, s:], attention_mask=mask, cache=kv, start=s, logits_at=at)
        assert torch.equal(got, span[at[0], at[1] - s])
        with pytest.raises(ValueError, match="not inside the span"):
            tiny(ids[:, s:], attention_mask=mask, cache=kv, start=s, logits_at=(torch.tensor([0]), torch.tensor([s - 1])))


def test_logits_range_is_the_rows_of_the_head_over_the_span(tiny: DiffusionLM) -> None:
    """logits_range takes logits_at's path: its rows are, bit for bit, the whole canvas's at those positions, a
    window of fewer rows than head_min_rows included (the head runs on copies up to that count), under a
    left-padded batch (Dream's shift) and inside a KV-cached span."""
    ids = torch.randint(0, tiny.config.vocab_size - 4, (3, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    with torch.no_grad():
        full = tiny(ids, attention_mask=mask)
        assert torch.equal(tiny(ids[:1], logits_range=(30, 33)), tiny(ids[:1])[:, 30:33])  # 3 rows < head_min_rows
        assert torch.equal(tiny(ids, attention_mask=mask, logits_range=(4, 12)), full[:, 4:12])
        kv = KVCache()
        tiny(ids, attention_mask=mask, cache=kv)
        span = tiny(ids[:, 24:32], attention_mask=mask, cache=kv, start=24)
        assert torch.equal(tiny(ids[:, 24:32], attention_mask=mask, cache=kv, start=24, logits_range=(26, 29)),
                           span[:, 2:5])
        with pytest.raises(ValueError, match="not inside the span"):
            tiny(ids[:, 24:32], attention_mask=mask, cache=kv, start=24, logits_range=(20, 26))
