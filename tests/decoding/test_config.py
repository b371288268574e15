"""Builders reject bad values with clear errors, before any forward; counting rules on a real tokenizer."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.decoding import (
    SLOWFAST_PRESETS,
    build_cache,
    build_policy,
    build_rule,
    check_combination,
    count_generated_tokens,
)
from dllm_bench.decoding.accounting import cut_at_stop_strings

from .scripted import ScriptedNetwork
from .spec_kwargs import spec_generate

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("frechet", {"delta": 1.0}, r"delta must be in \[0, 1\), got 1.0"),
        ("frechet", {"delta": -0.1}, "delta"),
        ("threshold", {"threshold": 0.0}, r"threshold must be in \(0, 1\]"),
        ("threshold", {"threshold": 1.5}, "threshold"),
        ("factor", {"f": 0.0}, "f must be > 0"),
        ("nucleus", {}, "is not one of"),
        ("frechet", {"threshold": 0.5}, "unknown"),
    ],
)
def test_bad_rule_values(name, params, match):
    with pytest.raises(ValueError, match=match):
        build_rule(name, **params)


def test_bad_policy_and_cache_values():
    with pytest.raises(ValueError, match="alg"):
        build_policy("dream", steps=4, alg="greedy")
    with pytest.raises(ValueError, match="preset"):
        build_policy("slowfast", preset="fastest")
    with pytest.raises(ValueError, match="is not one of"):
        build_policy("ar")
    with pytest.raises(ValueError, match="refresh_every"):
        build_cache("dual", refresh_every=0)
    with pytest.raises(ValueError, match="verify_ratio"):
        build_cache("dllm", verify_ratio=1.5)
    with pytest.raises(ValueError, match="response_interval"):
        build_cache("dllm", response_interval=0)
    with pytest.raises(ValueError, match="is not one of"):
        build_cache("paged")


def test_presets_match_code_and_paper():
    code, paper = build_policy("slowfast", preset="code"), build_policy("slowfast", preset="paper")
    assert (code.explore_steps, code.converge_threshold, code.threshold) == (6, 0.3, 0.9)
    assert (paper.explore_steps, paper.converge_threshold, paper.threshold) == (8, 0.1, 0.85)
    assert build_policy("slowfast", preset="paper", threshold=0.8).threshold == 0.8
    assert set(SLOWFAST_PRESETS) == {"code", "paper", "dream"}


@pytest.mark.parametrize(
    "policy,rule,cache,gen,block,match",
    [
        (("blocks", {}), ("frechet", {}), ("none", {}), 30, 8, "not a multiple of block_length"),
        (("blocks", {"steps": 10}), ("topk", {}), ("none", {}), 32, 8, "not divisible by the number of blocks"),
        (("blocks", {}), ("topk", {}), ("none", {}), 32, 8, "needs a fixed-step schedule"),
        (("blocks", {}), None, ("none", {}), 32, 8, "has no commit rule of its own"),
        (("blocks", {"steps": 8}), ("frechet", {}), ("none", {}), 32, 8, "adaptive"),
        (("dream", {"steps": 4}), ("frechet", {}), ("none", {}), 32, 32, "rule must be none"),
        (("dream", {"steps": 4}), ("topk", {}), ("none", {}), 32, 32, "rule must be none"),
        (("dream", {"steps": 4}), None, ("none", {}), 32, 8, "no blocks"),
        (("slowfast", {}), ("topk", {}), ("none", {}), 32, 32, "adaptive rule for its fast phase"),
        (("slowfast", {"truncate_fast": True}), None, ("dual", {}), 32, 32, "without a cache or with 'dllm'"),
        (("blocks", {"steps": 4}), ("topk", {}), ("dual", {"compat_first_token": True}), 32, 8, "1 step per block"),
        (("dream", {"steps": 1}), None, ("prefix", {"compat_first_token": True}), 32, 32, "1 step per block"),
    ],
)
def test_incompatible_combinations(policy, rule, cache, gen, block, match):
    sel = build_rule(rule[0], **rule[1]) if rule else None
    with pytest.raises(ValueError, match=match):
        check_combination(build_policy(policy[0], **policy[1]), sel, build_cache(cache[0], **cache[1]),
                          gen_length=gen, block_length=block)


def test_generate_rejects_before_any_forward():
    net = ScriptedNetwork(2, [[0.5] * 8])
    ids = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="classifier-free guidance"):
        spec_generate(net, ids, gen_length=8, block_length=8, policy=build_policy("blocks"),
                      rule=build_rule("frechet"), cache=build_cache("dual"), cfg_scale=1.0)
    with pytest.raises(ValueError, match="confidence measure"):
        spec_generate(net, ids, gen_length=8, block_length=8, policy=build_policy("blocks"),
                      rule=build_rule("frechet"), confidence="entropy")
    assert net.calls == []  # both refused by the spec, before generate runs
    with pytest.raises(ValueError, match="oracle"):
        spec_generate(net, ids, gen_length=8, block_length=8, policy=build_policy("blocks"),
                      rule=build_rule("oracle"))
    assert net.calls == [(1, 10)]  # the oracle error comes at its first decision


class CharTokenizer:
    """Minimal tokenizer: one id per character, id 0 = EOS."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join("<eos>" if i == 0 else chr(96 + i) for i in ids)

    def encode(self, text, add_special_tokens=False):
        out, i = [], 0
        while i < len(text):
            if text.startswith("<eos>", i):
                out.append(0)
                i += 5
            else:
                out.append(ord(text[i]) - 96)
                i += 1
        return out


def test_counting_rules():
    ids = [1, 2, 3, 24, 5, 0, 0, 6]  # "abc" + "x" + "e" + EOS EOS + "f"
    counts = count_generated_tokens(ids, CharTokenizer(), ["x"], stop_token_ids=[0], prompt_length=4)
    assert counts == {"tokens": 3, "tokens_non_eos": 6, "tokens_canvas_non_eos": 10, "tokens_gen_length": 8}
    no_stop = count_generated_tokens(ids, CharTokenizer(), [], stop_token_ids=[0])
    assert no_stop["tokens"] == 6
    assert cut_at_stop_strings("ab\n\nQuestion: c", ["Question:", "\n\n"]) == "ab"
