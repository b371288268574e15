"""DecodeSpec: every bad value or combination refused on construction with its one-line message, the groups
immutable, generate taking nothing else; each policy's typed per-row state."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dllm_bench.decoding import (
    Accounting,
    DecodeSpec,
    Decoding,
    NoCache,
    Sampling,
    TokenIds,
    build_cache,
    build_policy,
    build_rule,
    generate,
)
from dllm_bench.decoding.policies import BlockState, DreamState, DreamThresholdState, SlowFastState

from .scripted import ScriptedNetwork

pytestmark = pytest.mark.fast  # the inner loop: make test-fast

BLOCKS = build_policy("blocks")
FRECHET = build_rule("frechet")


def spec_of(decoding: dict | None = None, sampling: dict | None = None, **parts) -> DecodeSpec:
    """A spec from the parts that differ from adaptive blocks + Fréchet on 16 positions in blocks of 8."""
    d = {"gen_length": 16, "block_length": 8, "policy": BLOCKS, "rule": FRECHET, **(decoding or {})}
    return DecodeSpec(Decoding(**d), Sampling(**(sampling or {})), **parts)


@pytest.mark.parametrize("decoding,sampling,message", [
    ({"block_length": 5}, {}, r"^gen_length 16 is not a multiple of block_length 5$"),
    ({"gen_length": 0}, {}, r"^gen_length and block_length must be >= 1, got 0, 8$"),
    ({"gen_length": 16.0}, {}, r"^gen_length must be an integer, got 16\.0$"),
    ({"rule": None}, {}, r"^policy 'blocks' has no commit rule of its own"),
    ({"rule": build_rule("topk")}, {}, r"^rule 'topk' needs a fixed-step schedule"),
    ({"policy": build_policy("blocks", steps=4)}, {}, r"^rule 'frechet' is adaptive .* got steps=4$"),
    ({"policy": build_policy("blocks", steps=3), "rule": build_rule("topk")}, {},
     r"^steps 3 is not divisible by the number of blocks 2$"),
    ({"policy": build_policy("dream", steps=4), "rule": None}, {},
     r"^policy 'dream' has no blocks: block_length 8 must equal gen_length 16$"),
    ({"policy": build_policy("dream_threshold", steps=3), "rule": None, "block_length": 16}, {},
     r"^dream_threshold steps 3 must divide gen_length 16"),
    ({"policy": build_policy("slowfast", truncate_fast=True), "rule": None, "cache": build_cache("dual")}, {},
     r"^slowfast truncate_fast .* got 'dual'$"),
    ({"cache": "dual"}, {}, r"^cache must be a cache object .* got 'dual'$"),
    ({"rule": "frechet"}, {}, r"^rule must be a rule object .* got 'frechet'$"),
    ({"cache": build_cache("prefix")}, {"cfg_scale": 1.0}, r"^classifier-free guidance runs only without a cache"),
    ({}, {"cfg_scale": -1.0}, r"^cfg_scale must be >= 0, got -1\.0$"),
    ({}, {"temperature": -0.5}, r"^temperature must be >= 0, got -0\.5$"),
    ({}, {"confidence": "entropy"}, r"^confidence measure 'entropy' is not one of"),
    ({}, {"confidence_precision": "float8"}, r"^confidence precision 'float8' is not one of"),
    ({}, {"forbidden_token_ids": [1, "x"]}, r"^forbidden_token_ids must hold integers, got 'x'"),
    ({}, {"seed": [0, 1.5]}, r"^seed must hold integers, got 1\.5"),
    ({"policy": build_policy("dream", steps=4, alg="entropy"), "rule": None, "block_length": 16},
     {"confidence": "top1_prob"}, r"^dream alg 'entropy' uses confidence 'neg_entropy', got 'top1_prob'$"),
    ({"policy": build_policy("dream_threshold", steps=4), "rule": None, "block_length": 16},
     {"confidence": "margin"}, r"^policy 'dream_threshold' uses confidence 'top1_prob', got 'margin'$"),
])
def test_construction_refuses_a_bad_value_or_combination_in_one_line(decoding, sampling, message):
    with pytest.raises(ValueError, match=message) as err:
        spec_of(decoding, sampling)
    assert "\n" not in str(err.value)


def test_accounting_and_token_ids_refuse_a_bare_string():
    with pytest.raises(ValueError, match=r"^stop_strings must be a sequence of strings, got the string '\\n'$"):
        Accounting(stop_strings="\n")
    with pytest.raises(ValueError, match=r"^stop token ids must be a sequence of integer token ids"):
        TokenIds(stop="</s>")


def test_sequences_are_held_as_tuples_so_equal_specs_compare_equal():
    a = spec_of(sampling={"forbidden_token_ids": [5, 6], "seed": [1, 2]})
    b = spec_of(sampling={"forbidden_token_ids": (5, 6), "seed": (1, 2)})
    assert a == b and a.sampling.seed == (1, 2) and a.sampling.forbidden_token_ids == (5, 6)
    assert spec_of(sampling={"seed": 3}).sampling.seed == 3
    assert Accounting(stop_strings=["a"]).stop_strings == ("a",)


@pytest.mark.parametrize("part,name,value", [
    ("decoding", "gen_length", 32), ("sampling", "temperature", 1.0), ("accounting", "trace", True),
    ("token_ids", "mask", 3), (None, "sampling", Sampling()),
])
def test_every_group_is_frozen(part, name, value):
    spec = spec_of()
    target = spec if part is None else getattr(spec, part)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(target, name, value)


def test_for_batch_replaces_seeds_and_stop_strings_only():
    spec = spec_of(accounting=Accounting(trace=True, stop_strings=("x",)))
    batch = spec.for_batch([4, 5])
    assert batch.sampling.seed == (4, 5) and batch.accounting == spec.accounting
    assert batch.decoding is spec.decoding and batch.token_ids == spec.token_ids
    assert spec.for_batch(0, ["\n"]).accounting == Accounting(trace=True, stop_strings=("\n",))
    with pytest.raises(ValueError, match="seed must hold integers"):
        spec.for_batch(["a"])


@pytest.mark.parametrize("decoding,sampling,measure", [
    ({}, {}, "top1_prob"),
    ({"policy": build_policy("blocks", steps=4), "rule": build_rule("topk", remasking="random")}, {},
     "random"),
    ({"policy": build_policy("dream", steps=4, alg="topk_margin"), "rule": None, "block_length": 16}, {},
     "margin"),
    ({}, {"confidence": "neg_entropy"}, "neg_entropy"),
])
def test_measure_is_the_given_one_else_the_policy_or_remasking_default(decoding, sampling, measure):
    assert spec_of(decoding, sampling).measure == measure


def test_defaults_are_no_cache_greedy_and_nothing_counted():
    spec = DecodeSpec(Decoding(16, 16, build_policy("dream", steps=4)))
    assert spec.decoding.cache == NoCache() and spec.decoding.rule is None
    assert spec.sampling == Sampling(None, "float64", True, 0.0, 0.0, (), 0)
    assert spec.accounting == Accounting(False, None, ()) and spec.token_ids == TokenIds(None, None, None)


@pytest.mark.parametrize("not_a_spec", [None, {"gen_length": 8}, Decoding(8, 8, BLOCKS, FRECHET)])
def test_generate_refuses_anything_but_a_spec_naming_its_type(not_a_spec):
    net = ScriptedNetwork(2, [[0.5] * 8])
    with pytest.raises(TypeError, match=rf"^spec must be a DecodeSpec .*got {type(not_a_spec).__name__}$"):
        generate(net, torch.zeros(1, 2, dtype=torch.long), None, not_a_spec)
    assert net.calls == []


def test_spec_takes_a_decoding_group_not_plain_values():
    with pytest.raises(TypeError, match=r"^decoding must be a Decoding, got dict$"):
        DecodeSpec({"gen_length": 8})


@pytest.mark.parametrize("name,params,block_length,state_type", [
    ("blocks", {}, 8, BlockState),
    ("blocks", {"steps": 4}, 8, BlockState),
    ("dream", {"steps": 4}, 16, DreamState),
    ("dream_threshold", {"steps": 4}, 16, DreamThresholdState),
    ("slowfast", {"preset": "code"}, 8, SlowFastState),
    ("slowfast", {"preset": "dream"}, 16, SlowFastState),
])
def test_each_policy_keeps_its_own_typed_state(name, params, block_length, state_type):
    policy = build_policy(name, **params)
    state = policy.init_state(3, 16, block_length, torch.device("cpu"))
    assert type(state) is state_type and dataclasses.is_dataclass(state)
    lo, hi = policy.window(state)
    assert lo.shape == hi.shape == (3,) and bool((hi > lo).all())
    tensors = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)
               if isinstance(getattr(state, f.name), torch.Tensor)}
    # per row over the batch, but the per-block counts and Dream's per-step ratios
    assert all(t.shape[0] == 3 for k, t in tensors.items() if k not in ("commit_counts", "ratios"))


def test_block_state_carries_the_fixed_schedule_only_when_steps_are_fixed():
    fixed = build_policy("blocks", steps=4).init_state(2, 16, 8, torch.device("cpu"))
    assert fixed.steps_per_block == 2 and fixed.commit_counts.tolist() == [4, 4] and fixed.num_blocks == 2
    adaptive = build_policy("blocks").init_state(2, 16, 8, torch.device("cpu"))
    assert adaptive.steps_per_block is None and adaptive.commit_counts is None


def test_slowfast_state_starts_each_row_exploring_the_whole_first_block():
    state = build_policy("slowfast", preset="code").init_state(2, 16, 8, torch.device("cpu"))
    assert state.span_start.tolist() == [0, 0] and state.span_end.tolist() == [8, 8]
    assert not bool(state.fast.any()) and not bool(state.determined.any())
    assert state.end_estimates.shape == (2, 2) and state.estimates_held.tolist() == [0, 0]


def test_token_ids_given_in_the_spec_override_the_model_config():
    net = ScriptedNetwork(2, [[0.99, 0.99, 0.99, 0.5, 0.5, 0.5, 0.5, 0.5], [0.99] * 8])
    ids = torch.zeros(1, 2, dtype=torch.long)
    early = spec_of({"gen_length": 8, "block_length": 8, "rule": build_rule("threshold", threshold=0.9),
                     "early_stop": True})
    with pytest.raises(ValueError, match=r"^early_stop needs stop token ids .* spec.token_ids.stop or model.config$"):
        generate(net, ids, None, dataclasses.replace(early, token_ids=TokenIds(stop=())))
    assert net.calls == []
    # answer position j's top-1 is 1 + j % 10; the first step commits positions 0-2 (tokens 1, 2, 3)
    by_config = generate(net, ids, None, early)  # stop id 14 (model.config): decodes on
    assert by_config.tokens[0].tolist() == [1, 2, 3, 4, 5, 6, 7, 8] and by_config.records[0].nfe == 2
    net.calls.clear()
    by_spec = generate(net, ids, None, dataclasses.replace(early, token_ids=TokenIds(stop=(3,))))
    assert by_spec.tokens[0].tolist() == [1, 2, 3, 3, 3, 3, 3, 3] and by_spec.records[0].nfe == 1
