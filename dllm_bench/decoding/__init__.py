"""Decoding engine: selectors, policies, caches, the generate loop and its accounting."""

from dllm_bench.decoding.accounting import SampleRecord, StepTrace, count_generated_tokens
from dllm_bench.decoding.config import (
    DLLMCache,
    DualCache,
    FactorSelector,
    FrechetSelector,
    NoCache,
    OracleSelector,
    PrefixCache,
    ThresholdSelector,
    TopKSelector,
    build_cache,
    build_policy,
    build_selector,
    check_combination,
)
from dllm_bench.decoding.engine import GenerationOutput, generate
from dllm_bench.decoding.policies import (
    SLOWFAST_PRESETS,
    BlockPolicy,
    DreamPolicy,
    DreamThresholdPolicy,
    SlowFastPolicy,
)
from dllm_bench.decoding.spec import Accounting, DecodeSpec, Decoding, Sampling, TokenIds

__all__ = [
    "Accounting", "BlockPolicy", "DLLMCache", "DecodeSpec", "Decoding", "DreamPolicy", "DreamThresholdPolicy",
    "DualCache", "FactorSelector", "FrechetSelector", "GenerationOutput", "NoCache", "OracleSelector", "PrefixCache",
    "SLOWFAST_PRESETS", "SampleRecord", "Sampling", "SlowFastPolicy", "StepTrace", "ThresholdSelector", "TokenIds",
    "TopKSelector", "build_cache", "build_policy", "build_selector", "check_combination", "count_generated_tokens",
    "generate",
]
