"""One DecodeSpec per run: built from the composed config it equals the spec written by hand, and a combination
the spec refuses stops the run before any weights load."""

from __future__ import annotations

import pytest

import dllm_bench.runner.engine as engine_module
from dllm_bench.decoding import Accounting, DecodeSpec, Decoding, Sampling
from dllm_bench.decoding.config import (
    BlockPolicy,
    DLLMCache,
    DreamThresholdPolicy,
    DualCache,
    NoCache,
    OracleRule,
    SlowFastPolicy,
    ThresholdRule,
    TopKRule,
)
from dllm_bench.runner.components import build_spec
from dllm_bench.runner.engine import DecodingEngine
from dllm_bench.runner.sharding import DistContext
from dllm_bench.runner.validate import validate_config

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


@pytest.fixture()
def run_config(compose_cfg):
    """overrides -> the validated typed config of `dllm-bench <overrides>`."""
    return lambda *overrides: validate_config(compose_cfg("progress=false", *overrides))


@pytest.mark.parametrize("overrides,decoding,sampling", [
    (["rule=threshold", "rule.threshold=0.8", "cache=dual", "temperature=0.5", "seed=7"],
     Decoding(24, 8, BlockPolicy(steps=None), ThresholdRule(threshold=0.8), DualCache(), early_stop=True),
     Sampling(temperature=0.5, seed=7)),
    (["policy=slowfast_code", "cache=dllm", "confidence_precision=float32", "confidence_mask_in_softmax=false"],
     Decoding(24, 8, SlowFastPolicy(explore_steps=6, converge_threshold=0.3, stability_window=2, stability_threshold=1.0,
                                    threshold=0.9, explore_threshold=None, min_parallel=2, flavour="llada"),
              None, DLLMCache(prompt_interval=100, response_interval=6, verify_ratio=0.25, layer0_always=True),
              early_stop=True),
     Sampling(confidence_precision="float32", confidence_mask_in_softmax=False)),
    (["model=tiny_dream", "policy=dream_threshold", "policy.steps=4", "block_length=24", "early_stop=false"],
     Decoding(24, 24, DreamThresholdPolicy(steps=4, threshold=0.9), None, NoCache(), early_stop=False),
     Sampling()),
    (["rule=oracle", "gen_length=16"],
     Decoding(16, 8, BlockPolicy(steps=None), OracleRule(), NoCache(), early_stop=True), Sampling()),
])
def test_the_run_spec_equals_the_one_written_by_hand(run_config, overrides, decoding, sampling):
    assert build_spec(run_config(*overrides)) == DecodeSpec(decoding, sampling, Accounting())


def test_trace_is_the_run_specs_accounting(run_config):
    assert build_spec(run_config("trace=true")).accounting == Accounting(trace=True)


def test_the_oracle_run_decodes_against_its_sequential_reference_spec(run_config):
    c = run_config("rule=oracle", "gen_length=16", "early_stop=false")
    engine = DecodingEngine(c, DistContext())
    assert engine.spec == DecodeSpec(Decoding(16, 8, BlockPolicy(), OracleRule(), NoCache()), Sampling(),
                                     Accounting(tokenizer=engine.tokenizer))
    assert engine.sequential == DecodeSpec(Decoding(16, 8, BlockPolicy(steps=16), TopKRule(), NoCache()))
    prompts, docs = ["3 1 _ 4"], [{"sample_id": "a"}]
    extra = engine.prepare(prompts, docs, [5])
    assert tuple(extra["reference"].shape) == (1, 16)
    gen = engine.generate(prompts, docs, [5], ("\n",), **extra)[0]
    # the oracle reproduces its reference decode, committing at least one token per forward
    assert gen.ids == extra["reference"][0].tolist()
    assert 1 <= gen.nfe <= 16


def test_a_combination_the_spec_refuses_stops_the_run_before_the_model_loads(monkeypatch, tmp_path, run_cli):
    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded although the config is invalid")

    monkeypatch.setattr(engine_module, "load_cached_model", no_load)
    code, lines = run_cli(f"output_dir={tmp_path}", "policy=slowfast_paper", "cache=dual", "policy.truncate_fast=true")
    assert code == 2
    assert lines == ["dllm-bench: config error: policy=slowfast, rule=none, cache=dual: slowfast truncate_fast "
                     "(published fast phase) runs without a cache or with 'dllm', got 'dual'"]
