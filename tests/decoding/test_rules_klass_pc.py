"""KLASS and PC-Sampler against independent references written here with plain loops (hypothesis); their state,
reference tables, parameter ranges and refused combinations."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.decoding import build_cache, build_policy, check_combination
from dllm_bench.decoding.rules import StepContext, build_rule
from dllm_bench.decoding.rules.klass import PRESETS
from dllm_bench.decoding.rules.pc_sampler import TINY_TABLES, reference_table
from dllm_bench.tiny.reference_corpus import count as tiny_reference_counts

# ---------------------------------------------------------------- KLASS


def ref_klass(logits_steps, G: int, block: int, c: float, kappa: float, H: int, variant: str) -> list[set[int]]:
    """The published KLASS loop for one row written plainly: the whole canvas' previous distribution (zeros before
    the first forward) and last H KLs, the block's step counter, ready = masked in the block, stable and sure; else
    the most confident masked position of the block. Returns the positions committed at each step."""
    V = logits_steps[0].shape[1]
    masked = [True] * G
    prev = [[0.0] * V for _ in range(G)]
    hist = [[0.0] * H for _ in range(G)]
    out, t = [], 0
    for lo in range(0, G, block):
        step = 0
        while any(masked[lo:lo + block]):
            logits = logits_steps[t]
            t += 1
            p64 = torch.softmax(logits.to(torch.float64), dim=-1)
            p_model = torch.softmax(logits, dim=-1)
            conf, rank = [0.0] * G, [0.0] * G
            for j in range(G):
                kl = sum(float(p64[j, v]) * (math.log(float(p64[j, v]) + 1e-12) - math.log(prev[j][v] + 1e-12))
                         for v in range(V))
                hist[j] = hist[j][1:] + [kl]
                prev[j] = [float(p64[j, v]) for v in range(V)]
                x0 = int(p64[j].argmax()) if variant == "llada" else int(p_model[j].argmax())
                conf[j] = float(p64[j, x0])
                rank[j] = conf[j] if variant == "llada" else float(p_model[j, x0])
            open_ = [j for j in range(lo, lo + block) if masked[j]]
            sure = (lambda v: v > c) if variant == "llada" else (lambda v: v >= c)
            ready = {j for j in open_ if step >= H - 1 and all(k < kappa for k in hist[j]) and sure(conf[j])}
            if not ready:
                best = max(rank[j] for j in open_)
                ready = {min(j for j in open_ if rank[j] == best)}
            for j in ready:
                masked[j] = False
            out.append(ready)
            step += 1
    return out


def run_klass(rule, logits_steps, G: int, block: int) -> list[set[int]]:
    """Our rule driven as the engine drives it: read the candidates and the watched positions, fuse, commit."""
    state = rule.init_state(1, G, block, torch.device("cpu"))
    masked = torch.ones(1, G, dtype=torch.bool)
    j = torch.arange(G).unsqueeze(0)
    out, t = [], 0
    for lo in range(0, G, block):
        block_lo, block_hi = torch.tensor([lo]), torch.tensor([lo + block])
        while masked[0, lo:lo + block].any():
            logits = logits_steps[t]
            t += 1
            cand = masked & (j >= lo) & (j < lo + block)
            read = cand | rule.watch(state, masked, block_lo)
            pos = torch.nonzero(read[0]).flatten()
            rule.fuse_logits(state, logits[pos], torch.zeros_like(pos), pos, block_lo)
            p = torch.softmax(logits.to(torch.float64), dim=-1)
            conf = torch.where(cand, p.max(dim=-1).values.unsqueeze(0), float("-inf"))
            pred = p.argmax(dim=-1).unsqueeze(0)
            ctx = StepContext(conf, cand, pred, masked.clone(), None, state=state, block=(block_lo, block_hi))
            commit = rule.commit(ctx)
            tokens = rule.tokens(ctx)
            assert not (commit & ~cand).any()
            if rule.flavour == "dream":  # the token is the argmax of the logits-dtype softmax
                want = torch.softmax(logits, dim=-1).argmax(dim=-1).unsqueeze(0)
                assert torch.equal(tokens[commit], want[commit])
            masked &= ~commit
            out.append(set(torch.nonzero(commit[0]).flatten().tolist()))
    return out


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([(8, 4), (8, 8), (6, 2)]),
       st.sampled_from([(0.6, 0.015, 2), (0.3, 0.1, 2), (0.5, 0.05, 3), (0.9, 0.01, 1)]),
       st.sampled_from(["llada", "dream"]), st.sampled_from([0.02, 0.2, 1.0]))
def test_klass_matches_reference(seed, shape, params, variant, drift):
    """Logits that drift slowly (scale ``drift``) so that both the stable and the fallback branch are taken."""
    G, block = shape
    c, kappa, H = params
    g = torch.Generator().manual_seed(seed)
    V = 5
    base = torch.randn(G, V, generator=g) * 3
    logits_steps = [base + drift * torch.randn(G, V, generator=g) * (0.5 ** (t / 4)) for t in range(G + 1)]
    rule = build_rule("klass", threshold=c, kl_threshold=kappa, history_length=H, flavour=variant)
    assert run_klass(rule, logits_steps, G, block) == ref_klass(logits_steps, G, block, c, kappa, H, variant)


def test_klass_state_runs_on_the_meta_device():
    rule = build_rule("klass", flavour="dream")
    state = rule.init_state(2, 16, 8, torch.device("meta"))
    masked = torch.empty(2, 16, dtype=torch.bool, device="meta")
    lo = torch.empty(2, dtype=torch.long, device="meta")
    assert rule.watch(state, masked, lo).shape == (2, 16)
    idx = torch.empty(5, dtype=torch.long, device="meta")
    rule.fuse_logits(state, torch.empty(5, 11, device="meta"), idx, idx, lo)
    conf = torch.empty(2, 16, dtype=torch.float64, device="meta")
    ctx = StepContext(conf, masked, torch.empty(2, 16, dtype=torch.long, device="meta"), masked, None, state=state,
                      block=(lo, lo))
    assert rule.commit(ctx).shape == (2, 16)


def test_klass_presets_are_the_published_scripts():
    assert PRESETS["llada_gsm8k"] == {"threshold": 0.6, "kl_threshold": 0.015}
    assert PRESETS["llada_humaneval"] == {"threshold": 0.9, "kl_threshold": 0.01}
    assert PRESETS["dream_gsm8k"] == {"threshold": 0.9, "kl_threshold": 0.001, "flavour": "dream"}
    for params in PRESETS.values():
        build_rule("klass", **params)


@pytest.mark.parametrize(("params", "match"), [
    ({"threshold": 1.5}, r"^klass threshold must be in \[0, 1\], got 1.5$"),
    ({"kl_threshold": 0.0}, r"^klass kl_threshold must be > 0 \(nats\), got 0.0$"),
    ({"history_length": 0}, r"^klass history_length must be >= 1, got 0$"),
    ({"flavour": "llama"}, r"^klass flavour must be one of \('llada', 'dream'\), got 'llama'$"),
])
def test_klass_refuses_bad_values_in_one_line(params, match):
    with pytest.raises(ValueError, match=match):
        build_rule("klass", **params)


def test_klass_refuses_the_dual_cache_and_policies_without_blocks():
    with pytest.raises(ValueError, match="^rule 'klass' reads the next block's distributions every step; cache 'dual'"):
        check_combination(build_policy("blocks"), build_rule("klass"), build_cache("dual"), gen_length=24,
                          block_length=8)
    with pytest.raises(ValueError, match="^rule 'klass' counts its steps per block of policy 'blocks'"):
        check_combination(build_policy("slowfast"), build_rule("klass"), build_cache("none"), gen_length=24,
                          block_length=8)
    for cache in ("none", "prefix", "dllm"):
        check_combination(build_policy("blocks"), build_rule("klass"), build_cache(cache), gen_length=24,
                          block_length=8)


def test_klass_takes_steps_with_the_llada_loop_only():
    check_combination(build_policy("blocks", steps=12), build_rule("klass"), build_cache("none"), gen_length=24,
                      block_length=8)
    with pytest.raises(ValueError, match=r"^rule 'klass' flavour 'dream' runs dream_klass.py's steps = gen_length "
                                         r"\(policy blocks without steps\), got steps=12$"):
        check_combination(build_policy("blocks", steps=12), build_rule("klass", flavour="dream"),
                          build_cache("none"), gen_length=24, block_length=24)


# ---------------------------------------------------------------- PC-Sampler


def ref_pc_sampler(conf, pred, cand, lo, k, lambd, alpha, table, missing) -> set[int]:
    """Score every candidate as PC-Sampler's pc_sampler_function (float32), the k best (ties: lower position)."""
    scores = {}
    for j in range(len(conf)):
        if cand[j]:
            p_ref = torch.tensor(table[pred[j]] if pred[j] < len(table) else missing, dtype=torch.float32)
            calibrated = torch.clamp(-torch.tensor(conf[j], dtype=torch.float32) * torch.log(p_ref + 1e-9), max=alpha)
            bias = torch.exp(-lambd * torch.tensor(float(j - lo), dtype=torch.float32))
            scores[j] = float(bias * calibrated)
    return set(sorted(scores, key=lambda j: (-scores[j], j))[:k])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 12), st.integers(0, 4), st.integers(1, 3),
       st.sampled_from([(0.25, 10.0), (0.0, 10.0), (1.0, 1.0)]))
def test_pc_sampler_matches_reference(seed, width, lo, k, params):
    lambd, alpha = params
    g = torch.Generator().manual_seed(seed)
    G = lo + width
    conf = torch.rand(1, G, generator=g, dtype=torch.float64)
    pred = torch.randint(0, 112, (1, G), generator=g)
    cand = (torch.rand(1, G, generator=g) < 0.7) & (torch.arange(G) >= lo)
    conf = torch.where(cand, conf, float("-inf"))
    rule = build_rule("pc_sampler", lambd=lambd, alpha=alpha)
    ctx = StepContext(conf, cand, pred, cand.clone(), None, quota=torch.tensor([k]),
                      block=(torch.tensor([lo]), torch.tensor([G])))
    got = set(torch.nonzero(rule.commit(ctx)[0]).flatten().tolist())
    table, missing = reference_table("tiny_llada")
    want = ref_pc_sampler(conf[0].tolist(), pred[0].tolist(), cand[0].tolist(), lo, k, lambd, alpha,
                          table.tolist(), missing)
    assert got == want


def test_reference_corpus_loads_pc_samplers_format(tmp_path):
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({"num_token": 1000, "p_baseline_dict": {"3": 250, "7": 1}}))
    table, missing = reference_table(str(path))
    assert missing == 1 / 1000
    assert table.dtype == torch.float32 and table.shape == (8,)
    assert table[3] == torch.tensor(0.25, dtype=torch.float32) and table[7] == torch.tensor(0.001)
    assert table[0] == torch.tensor(1 / 1000, dtype=torch.float32)


def test_reference_corpus_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^pc_sampler reference_corpus '/no/such.json' is not a file nor one of"):
        build_rule("pc_sampler", reference_corpus="/no/such.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"token_frequency_dict": {}}))
    with pytest.raises(ValueError, match="is not PC-Sampler's format"):
        reference_table(str(bad))


def test_tiny_reference_tables_cover_the_answers_tokens():
    for flavour in ("tiny_llada", "tiny_dream"):
        table, missing = reference_table(flavour)
        counts = tiny_reference_counts(flavour)
        assert json.loads((TINY_TABLES / f"{flavour}.json").read_text()) == counts  # the shipped file is current
        assert counts["num_token"] % 500 == 0 and missing == 1 / counts["num_token"]  # 500 puzzles, one length
        seen = torch.tensor([int(k) for k in counts["p_baseline_dict"]])
        assert (table > 0).all() and abs(float(table[seen].double().sum()) - 1) < 1e-6


def test_pc_sampler_is_a_fixed_count_rule_of_blocks():
    rule = build_rule("pc_sampler")
    assert not rule.adaptive
    check_combination(build_policy("blocks", steps=24), rule, build_cache("dual"), gen_length=24, block_length=8)
    with pytest.raises(ValueError, match="^rule 'pc_sampler' ranks the positions of a block of policy 'blocks'"):
        check_combination(build_policy("dpad", steps=24), rule, build_cache("none"), gen_length=24, block_length=8)
    with pytest.raises(ValueError, match="^rule 'pc_sampler' needs a fixed-step schedule"):  # not a crash mid-decode
        check_combination(build_policy("blocks"), rule, build_cache("none"), gen_length=24, block_length=8)
