"""What one ``generate`` call runs: decoding, sampling and accounting settings, validated once on construction.

The builders (``build_policy``, ``build_rule``, ``build_cache``) turn plain values into the objects held
here; a ``DecodeSpec`` that exists is a combination the engine can run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from dllm_bench.decoding.confidence import check_measure, resolve_precision
from dllm_bench.decoding.config import (
    CACHES,
    Cache,
    NoCache,
    Policy,
    Rule,
    check_combination,
)
from dllm_bench.decoding.policies import POLICIES
from dllm_bench.decoding.rules import RULES


def _int_tuple(name: str, values: Sequence[int]) -> tuple[int, ...]:
    """``values`` as a tuple of ints (so specs compare and hash by value); ValueError naming a non-integer."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | torch.Tensor):
        raise ValueError(f"{name} must be a sequence of integer token ids, got {values!r}")
    out = tuple(values.tolist()) if isinstance(values, torch.Tensor) else tuple(values)
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{name} must hold integers, got {v!r} in {values!r}")
    return out


@dataclass(frozen=True)
class Decoding:
    """Which positions are decoded and how: answer and block lengths, the schedule (``policy``), its commit rule
    (``rule``; None for the policies with a rule of their own) and the K/V ``cache``; ``early_stop`` ends a
    row once its answer is complete up to a stop token."""

    gen_length: int
    block_length: int
    policy: Policy
    rule: Rule | None = None
    cache: Cache = field(default_factory=NoCache)
    early_stop: bool = False

    def __post_init__(self) -> None:
        for name in ("gen_length", "block_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if not isinstance(self.policy, tuple(POLICIES.values())):
            raise ValueError(f"policy must be a policy object (build_policy(name)), got {self.policy!r}")
        if self.rule is not None and not isinstance(self.rule, tuple(RULES.values())):
            raise ValueError(f"rule must be a rule object (build_rule(name)) or None, got {self.rule!r}")
        if not isinstance(self.cache, tuple(CACHES.values())):
            raise ValueError(f"cache must be a cache object (build_cache(name); build_cache('none') for none), "
                             f"got {self.cache!r}")


@dataclass(frozen=True)
class Sampling:
    """How a prediction and its confidence come from the logits.

    ``confidence`` None = the measure the policy or the topk remasking implies; ``confidence_mask_in_softmax``
    keeps the mask id in the confidence's softmax denominator as the published code does (False: renormalised
    over the other ids); ``forbidden_token_ids`` are never predicted (the mask id never is either); ``seed`` an
    int or one per row, used only when sampling (temperature > 0 or the random measure).
    """

    confidence: str | None = None
    confidence_precision: str | torch.dtype = "float64"
    confidence_mask_in_softmax: bool = True
    temperature: float = 0.0
    cfg_scale: float = 0.0
    forbidden_token_ids: Sequence[int] = ()
    seed: int | Sequence[int] = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.confidence is not None:
            check_measure(self.confidence)
        resolve_precision(self.confidence_precision, torch.float32)  # raises on an unknown name
        object.__setattr__(self, "forbidden_token_ids", _int_tuple("forbidden_token_ids", self.forbidden_token_ids))
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            object.__setattr__(self, "seed", _int_tuple("seed", self.seed))


@dataclass(frozen=True)
class TokenIds:
    """Special token ids; None = read from ``model.config`` when ``generate`` runs."""

    mask: int | None = None
    stop: Sequence[int] | None = None
    pad: int | None = None

    def __post_init__(self) -> None:
        if self.stop is not None:
            object.__setattr__(self, "stop", _int_tuple("stop token ids", self.stop))


@dataclass(frozen=True)
class Accounting:
    """What is recorded besides tokens and NFE: per-step traces (``trace``), and generated-token counts when a
    ``tokenizer`` is given (the text cut at the first of ``stop_strings``)."""

    trace: bool = False
    tokenizer: Any = None
    stop_strings: Sequence[str] = ()

    def __post_init__(self) -> None:
        if isinstance(self.stop_strings, str):
            raise ValueError(f"stop_strings must be a sequence of strings, got the string {self.stop_strings!r}")
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))


@dataclass(frozen=True)
class DecodeSpec:
    """Everything ``generate`` needs besides the model and the batch; the combination is checked here, once."""

    decoding: Decoding
    sampling: Sampling = field(default_factory=Sampling)
    accounting: Accounting = field(default_factory=Accounting)
    token_ids: TokenIds = field(default_factory=TokenIds)

    def __post_init__(self) -> None:
        d = self.decoding
        if not isinstance(d, Decoding):
            raise TypeError(f"decoding must be a Decoding, got {type(d).__name__}")
        check_combination(d.policy, d.rule, d.cache, gen_length=d.gen_length, block_length=d.block_length,
                          cfg_scale=self.sampling.cfg_scale)
        given = self.sampling.confidence
        if given is not None:
            d.policy.check_measure(given)
        rule = d.rule
        if given is not None and rule is not None and not rule.measure_overridable and given != rule.measure:
            raise ValueError(f"rule {rule.name!r} ranks by {rule.measure!r} (its parameters are in that measure's "
                             f"units), got confidence {given!r}")

    @property
    def measure(self) -> str:
        """The confidence measure candidates are ranked by: the given one, else the policy's or the remasking's."""
        if self.sampling.confidence is not None:
            return self.sampling.confidence
        if self.decoding.policy.measure is not None:
            return self.decoding.policy.measure
        return "top1_prob" if self.decoding.rule is None else self.decoding.rule.measure

    def for_batch(self, seed: int | Sequence[int], stop_strings: Sequence[str] | None = None) -> DecodeSpec:
        """This spec with one batch's row seeds (and stop strings): what a run changes from batch to batch."""
        accounting = self.accounting if stop_strings is None else replace(self.accounting, stop_strings=stop_strings)
        return replace(self, sampling=replace(self.sampling, seed=seed), accounting=accounting)
