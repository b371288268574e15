"""Decoding engine: rules, policies, caches, the generate loop and its accounting.

``__all__`` holds every registered rule, policy and cache class (from their registries, so a method added in its
own files is exported with no edit here), their builders, the spec and ``generate``.
"""

from dllm_bench.decoding.accounting import SampleRecord, StepTrace, count_generated_tokens
from dllm_bench.decoding.caches import CACHES
from dllm_bench.decoding.config import build_cache, build_policy, check_combination
from dllm_bench.decoding.engine import GenerationOutput, generate
from dllm_bench.decoding.policies import POLICIES, SLOWFAST_PRESETS
from dllm_bench.decoding.rules import RULES, build_rule
from dllm_bench.decoding.spec import Accounting, DecodeSpec, Decoding, Sampling, TokenIds

# every registered class under its own name (e.g. BlockPolicy, ThresholdRule, DualCache)
REGISTERED = {cls.__name__: cls for registry in (RULES, POLICIES, CACHES) for cls in registry.values()}
globals().update(REGISTERED)

__all__ = [
    "Accounting", "CACHES", "DecodeSpec", "Decoding", "GenerationOutput", "POLICIES", "RULES", "SLOWFAST_PRESETS",
    "SampleRecord", "Sampling", "StepTrace", "TokenIds", "build_cache", "build_policy", "build_rule",
    "build_rule", "check_combination", "count_generated_tokens", "generate",
]
__all__ += sorted(REGISTERED)
