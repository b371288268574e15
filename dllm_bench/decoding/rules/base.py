"""What a decoding rule is: the ``Rule`` protocol, the step it sees (``StepContext``) and the registry.

A rule is one file in this package: a frozen dataclass whose fields are its parameters (their defaults are the
published defaults, the one place they live), registered with ``@register``. It declares what it ranks
candidates by (``measure``, a name of ``confidence.MEASURES``), whether it is adaptive (commits a data-dependent
count, a block runs until full) or follows a policy's fixed count, and the state it keeps across steps
(``init_state``; None = none). ``commit(ctx)`` returns the commit mask; a rule that writes other tokens than the
predictions also defines ``tokens(ctx)``. Optional hooks, with do-nothing defaults in :class:`RuleBase` that the
engine calls every step: ``read(state, candidates, masked, active, block_lo)`` names the positions whose logits
the step reads (the candidates; KLASS adds the positions it watches, never committed), ``fuse_logits(state,
logits, row, position, block_lo)`` sees the logits at the positions read and returns the ones the choice is made
from (it may only record them), ``plan(state, rows, block_lo, generators, canvas_lengths)`` (a rule whose commits
need no logits, ``random_order``, declared by ``plans``) returns the order it commits by before the forward, so
the engine can tell the cache the step's commits (``HostView.planned``), and ``trace_terms`` adds the rule's own
terms to a step's trace (Fréchet's gap). Parameters are strict: an unknown key or a value of the wrong type is
refused in one line naming key, value and what is allowed; ``check()`` refuses values out of range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from dllm_bench.decoding.params import Registry


@dataclass
class StepContext:
    """What a policy and its rule see when deciding: confidences (-inf off candidates), candidates, predictions.

    ``quota`` is the policy's commit count per row for fixed-count rules (None for adaptive policies);
    ``state`` is the rule's own cross-step state (``Rule.init_state``), None for stateless rules.
    """

    confidence: torch.Tensor  # [B, G] float, -inf off candidates
    candidates: torch.Tensor  # [B, G] bool
    prediction: torch.Tensor  # [B, G] long, x0 (mask id off candidates)
    masked: torch.Tensor  # [B, G] bool, before this step's commit
    reference: torch.Tensor | None  # [B, G] long, oracle reference
    quota: torch.Tensor | None = None  # [B] long, the policy's count (fixed-step schedules)
    state: Any = None  # the rule's state
    block: tuple[torch.Tensor, torch.Tensor] | None = None  # ([B], [B]) answer span of the current block
    last_step: torch.Tensor | None = None  # [B] bool: the last step of a block of a fixed step count (else None)
    # confidence and x0 at every position the step read (``Policy.read``: committed ones too, for edits); the
    # same tensors as ``confidence`` / ``prediction`` where it read the candidates only
    read_confidence: torch.Tensor | None = None
    read_prediction: torch.Tensor | None = None


@runtime_checkable
class Rule(Protocol):
    """A commit rule: which candidates a step commits."""

    name: ClassVar[str]
    adaptive: ClassVar[bool]  # True: data-dependent count (policy blocks with steps=None); False: the policy's quota

    @property
    def measure(self) -> str:
        """The confidence measure the rule ranks by (``confidence.MEASURES``)."""

    def check(self) -> None:
        """Raise ValueError (one line naming the value and the allowed range) for a parameter out of range."""

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> Any:
        """State kept across steps (None = stateless)."""

    def commit(self, ctx: StepContext) -> torch.Tensor:
        """Commit mask [B, G] bool, a subset of ``ctx.candidates``."""


class RuleBase:
    """Defaults of the optional parts of the protocol; rules subclass it as frozen dataclasses."""

    name: ClassVar[str] = ""
    adaptive: ClassVar[bool] = True
    # an adaptive rule that also runs under a fixed step count (policy blocks with steps): its fallback commits
    # the policy's count (``ctx.quota``) and a block ends after its steps or when full
    takes_steps: ClassVar[bool] = False
    # True: a measure given in Sampling(confidence=...) replaces ``measure`` (rules comparing a probability-like
    # score); False: the rule's thresholds are in its own measure's units (an entropy), so any other is refused
    measure_overridable: ClassVar[bool] = True
    # host reads per decoding step at batch 1 it stays within (scripts/count_syncs.py, tests/decoding/test_sync_budget.py)
    sync_budget: ClassVar[int] = 3

    @property
    def measure(self) -> str:
        return "top1_prob"

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        return None

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> Any:
        return None

    # its commits are known before the forward (``plan``: an order drawn from each row's generator over the row's
    # canvas length, which the engine then provides)
    plans: ClassVar[bool] = False

    def tokens(self, ctx: StepContext) -> torch.Tensor:
        """Tokens written at committed positions (the predictions)."""
        return ctx.prediction

    def read(self, state: Any, candidates: torch.Tensor, masked: torch.Tensor, active: torch.Tensor,
             block_lo: torch.Tensor) -> torch.Tensor:
        """[B, G] positions whose logits the step reads: the candidates (``masked``: the answer's masks, ``active``
        [B] the rows still decoding)."""
        return candidates

    def fuse_logits(self, state: Any, logits: torch.Tensor, row: torch.Tensor, position: torch.Tensor,
                    block_lo: torch.Tensor) -> torch.Tensor:
        """The logits [n, V] the choice is made from, given those at rows ``row`` and answer positions ``position``
        [n] of the positions read (unchanged)."""
        return logits

    def plan(self, state: Any, rows: Sequence[int], block_lo: Sequence[int], generators: Sequence[torch.Generator],
             canvas_lengths: Sequence[int]) -> torch.Tensor | None:
        """The [B, G] order the step commits by (the higher, the earlier), known before the forward; None = the
        logits decide."""
        return None

    def trace_terms(self, sorted_confidences: torch.Tensor, n_committed: torch.Tensor) -> dict[str, torch.Tensor]:
        """[B] values of the rule's own ``StepTrace`` fields at each row's committed count (rows committing at least
        one): none here."""
        return {}

    def check_combination(self, *, policy: Any, cache: Any, gen_length: int, block_length: int) -> None:
        """Raise ValueError where the published code never ran this rule with that policy or cache."""
        return None


NO_RULE_HOOKS = RuleBase()  # the rule hooks where a policy commits by its own rule (no rule): the defaults

RULES = Registry("rule")
register = RULES.register  # class decorator: add a rule dataclass to ``RULES`` under its name
rule_parameters = RULES.parameters
rule_defaults = RULES.defaults
build_rule = RULES.build


def rule_tokens(rule, ctx: StepContext) -> torch.Tensor:
    """Tokens a rule writes at its committed positions."""
    return rule.tokens(ctx)
