"""What a decoding policy is: the ``Policy`` protocol, the defaults of its optional hooks and the registry.

A policy is one file in this package: a frozen dataclass whose fields are its parameters (their defaults are the
published defaults, the one place they live), registered with ``@register``, plus ``conf/policy/<name>.yaml``. It
keeps per-row progress as tensors over the batch in a state of its own (``init_state``) and answers, each step,
which answer positions are candidates (``window``), which block a cache treats as current (``block``), which
candidates to commit (``decide``) and, after the commit, which rows are finished (``finished``, by default its
``advance``). Positions are answer coordinates (0 = first generated position).

Everything else is an optional hook with a do-nothing default in :class:`PolicyBase`, which ``generate`` calls
unconditionally: what a forward computes (``forward``, ``dropout``, ``canvas_limit``) and feeds (``soft_inputs``:
input embeddings in place of some tokens' own, DMax's mix of token and mask embeddings), which positions' predictions
the step reads (``read``: committed ones too, for a policy that edits them), edits after the commit (``revise``:
rewrite or re-mask committed tokens; it returns what it edited, which the accounting counts per step and sample),
where the answer sits (``place_prompt``), what ends a row early (``ends_rows_early``), the confidence it ranks by (``measure``), and what it
accepts: its parameters (``check``), the rules, caches, lengths and guidance it runs with (``refuse_rule``,
``refuse_lengths``, ``refuse_cache``, ``refuse_cfg``: one line saying why not, None = accepted) and the model
(``check_model``). A policy that needs something new gets a new hook here with a default, not a branch in the loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from dllm_bench.decoding.params import Registry
from dllm_bench.decoding.rules.base import StepContext
from dllm_bench.decoding.suffix_dropout import SuffixSampler


def span_mask(lo: torch.Tensor, hi: torch.Tensor, length: int) -> torch.Tensor:
    """[B, length] bool: lo[b] <= j < hi[b]."""
    j = torch.arange(length, device=lo.device).unsqueeze(0)
    return (j >= lo.unsqueeze(1)) & (j < hi.unsqueeze(1))


def blocked_bounds(state: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The current block of a state with ``block`` [B] and ``block_length``: answer span [lo, lo + block_length)."""
    lo = state.block * state.block_length
    return lo, lo + state.block_length


def grid_offset(prompt_mask: torch.Tensor, block_length: int, config: Any) -> torch.Tensor:
    """[B] answer position 0's place in its block of the absolute grid (the row's real prompt length mod
    ``block_length``); refuses a block length other than the size of the model's block-causal attention."""
    size = getattr(config, "block_size", 0)
    if getattr(config, "attention", "full") == "block_causal" and size and block_length != size:
        raise ValueError(f"block_length {block_length} differs from the model's block_size {size} (its block-causal "
                         "attention runs at that size)")
    return prompt_mask.sum(dim=1).to(torch.long) % block_length


def grid_bounds(block: torch.Tensor, block_length: int, offset: torch.Tensor, gen_length: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Answer span [lo, hi) of grid block ``block`` [B] (answer position 0 at ``offset`` [B] in block 0), clipped to
    the answer."""
    lo = (block * block_length - offset).clamp(0, gen_length)
    return lo, ((block + 1) * block_length - offset).clamp(0, gen_length)


def stop_in_finished_block(answer: torch.Tensor, hi: torch.Tensor, finished: torch.Tensor, stop_id: int) -> torch.Tensor:
    """[B] bool: rows whose block just ``finished`` leaves ``stop_id`` in the answer before ``hi`` (LLaDA2.0's
    ``generate`` and the LLaDA2.1 sampler end a decode there)."""
    j = torch.arange(answer.shape[1], device=answer.device).unsqueeze(0)
    return finished & ((answer == stop_id) & (j < hi.unsqueeze(1))).any(dim=1)


def advance_and_stop_after_block(policy: Any, state: Any, answer: torch.Tensor, masked: torch.Tensor,
                                 active: torch.Tensor, stop_id: int | None) -> torch.Tensor:
    """A block policy's ``finished``: [B] bool rows its ``advance`` ends, and with ``stop_after_block`` also the rows
    whose block just finished with ``stop_id`` in the answer before its end."""
    _, hi = policy.block(state)
    before = state.block.clone()
    done = policy.advance(state, masked, active)
    if policy.stop_after_block and stop_id is not None:
        done |= active & stop_in_finished_block(answer, hi, state.block != before, stop_id)
    return done


def refuse_shifted_logits(policy: str, config: Any) -> None:
    """A policy that rewrites a token from the prediction at its own position needs unshifted logits (LLaDA's)."""
    if getattr(config, "shift_logits", False):
        raise ValueError(f"policy {policy!r} rewrites a token from the prediction at its own position, which "
                         "a model with shifted logits (Dream) does not make there: run it on a LLaDA-format model")


def is_positive_int(value: Any) -> bool:
    """An integer >= 1 (a bool is none)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@runtime_checkable
class Policy(Protocol):
    """A decoding schedule: candidates, the current block, the commit and the end of each row."""

    name: ClassVar[str]

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> Any:
        """Per-row progress as tensors over the batch."""

    def block(self, state: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """[B] bounds (answer coordinates) of the block a cache treats as current."""

    def window(self, state: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """[B] bounds of the candidate span: the masked positions inside it are the step's candidates."""

    def decide(self, state: Any, ctx: StepContext, rule: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Commit mask [B, G] and the tokens written there; ``rule`` is the configured rule (None: the policy's
        own)."""

    def advance(self, state: Any, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """Move the ``active`` rows on after the commit (``masked``: the answer's masks now); [B] bool: rows done."""

    def finished(self, state: Any, answer: torch.Tensor, masked: torch.Tensor, active: torch.Tensor,
                 stop_id: int | None) -> torch.Tensor:
        """[B] bool: rows finished after this step's commit (``advance``, or an early end on ``stop_id``)."""

    def forward(self, state: Any, runner: Any, x: torch.Tensor, rows: torch.Tensor, read: torch.Tensor,
                view: Any) -> list:
        """The step's forwards (``ForwardResult``) for the active ``rows``: logits at least at ``read``."""

    def read(self, state: Any, read: torch.Tensor, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """[B, G] bool: the answer positions whose predictions the step computes (``read``: the rule's, the
        candidates or more); a policy that edits committed tokens adds them (``StepContext.read_confidence``)."""

    def soft_inputs(self, state: Any, runner: Any, x: torch.Tensor, active: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Input embeddings the step's forwards take in place of the tokens' own: (where [B, T] bool, embeddings
        [B, T, d]) over the canvas ``x`` [B, T]; None = the tokens' own everywhere."""

    def revise(self, state: Any, ctx: StepContext, answer: torch.Tensor, active: torch.Tensor,
               mask_id: int) -> torch.Tensor | None:
        """Edit the answer [B, G] in place after the commit (rewrite or re-mask committed tokens, from ``ctx``'s
        predictions); [B, G] bool: the positions it edited (None: none)."""

    def canvas_limit(self, state: Any) -> torch.Tensor | None:
        """[B] answer length the network sees per row; None = the whole canvas."""

    def unsettled(self, state: Any, masked: torch.Tensor) -> torch.Tensor:
        """[B, G] bool: answer positions a later step may still change (``masked``: the masks; a policy that edits
        committed tokens adds those it may still rewrite): ``early_stop`` reads an answer as complete only up to
        a settled stop token."""

    def dropout(self, gen_length: int, seed: int | Sequence[int], batch: int,
                device: torch.device) -> SuffixSampler | None:
        """The suffix positions each forward drops (DPad); None = it sees the whole canvas."""

    def ends_rows_early(self) -> str | None:
        """What ends a row before its answer is committed, the rest then the first stop id (None: nothing)."""

    def hold_blocks(self, state: Any) -> None:
        """Make the rows of the batch leave a block together (a cache whose published loop does: d2Cache's
        ``top_up``, ``Cache.holds_full_blocks``)."""

    def check(self) -> None:
        """Raise ValueError (one line naming the value and the allowed range) for a parameter out of range."""

    def place_prompt(self, state: Any, prompt_mask: torch.Tensor, config: Any) -> None:
        """See, once before the first step, the prompt's attention mask [B, P] (left padding 0) and the model
        config: where each row's answer sits (block diffusion's absolute grid); raise ValueError where it cannot run."""

    def check_combination(self, rule: Any, cache: Any, *, gen_length: int, block_length: int,
                          cfg_scale: float = 0.0) -> None:
        """Raise ValueError (one line) where this policy cannot run with that rule, cache, lengths or guidance."""

    def check_measure(self, given: str) -> None:
        """Raise ValueError where a given confidence measure is not the one this policy ranks by."""

    def check_model(self, config: Any) -> None:
        """Raise ValueError where this policy cannot run on a model with that config."""


class PolicyBase:
    """Defaults of the optional hooks of the protocol; policies subclass it as frozen dataclasses."""

    name: ClassVar[str] = ""
    # the model flavours (llada, dream) its published loop runs on (the runner refuses others)
    flavours: ClassVar[tuple[str, ...]] = ("llada", "dream")
    # host reads per decoding step at batch 1 its loop stays within (scripts/count_syncs.py,
    # tests/decoding/test_sync_budget.py); above the engine's 3 where its own loop reads more
    sync_budget: ClassVar[int] = 3
    # its blocks tile the answer from its first position, so gen_length is a multiple of block_length (False: they
    # tile the canvas from the prompt's start, block diffusion's absolute grid, and the answer may end anywhere)
    blocks_from_answer: ClassVar[bool] = True
    # it rewrites a token from the prediction at the token's own position, which a model with shifted logits (Dream)
    # does not make there: such models are refused (``check_model``, ``refuse_shifted_logits``)
    unshifted_logits: ClassVar[bool] = False

    @property
    def measure(self) -> str | None:
        """The confidence measure it ranks by; None = the rule's (or top-1 probability without a rule)."""
        return None

    def __post_init__(self) -> None:
        self.check()

    # published settings as changes to the dataclass's defaults, by name, their one place; a file
    # conf/policy/<policy>_<preset>.yaml (or <preset>.yaml) selects each (/defaults/policy/<policy>_<preset>)
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    default_preset: ClassVar[str | None] = None  # expanded when the builder names none

    @classmethod
    def prepare(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The builder's keyword arguments as the dataclass's parameters: ``preset`` (or ``default_preset``)
        expanded, its values under the given ones."""
        preset = params.pop("preset", cls.default_preset)
        if preset is None:
            return params
        if preset not in cls.presets:
            raise ValueError(f"{cls.name} preset {preset!r} is not one of {sorted(cls.presets) or 'none'}")
        return {**cls.presets[preset], **params}

    def check(self) -> None:
        return None

    def window(self, state: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.block(state)

    def finished(self, state: Any, answer: torch.Tensor, masked: torch.Tensor, active: torch.Tensor,
                 stop_id: int | None) -> torch.Tensor:
        return self.advance(state, masked, active)

    def forward(self, state: Any, runner: Any, x: torch.Tensor, rows: torch.Tensor, read: torch.Tensor,
                view: Any) -> list:
        return runner.run(x, rows, read, view)

    def read(self, state: Any, read: torch.Tensor, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        return read

    def soft_inputs(self, state: Any, runner: Any, x: torch.Tensor, active: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    def revise(self, state: Any, ctx: StepContext, answer: torch.Tensor, active: torch.Tensor,
               mask_id: int) -> torch.Tensor | None:
        return None

    def canvas_limit(self, state: Any) -> torch.Tensor | None:
        return None

    def unsettled(self, state: Any, masked: torch.Tensor) -> torch.Tensor:
        return masked

    def dropout(self, gen_length: int, seed: int | Sequence[int], batch: int,
                device: torch.device) -> SuffixSampler | None:
        return None

    def ends_rows_early(self) -> str | None:
        return None

    def hold_blocks(self, state: Any) -> None:
        raise ValueError(f"policy {self.name!r} has no blocks for rows to leave together (a cache with "
                         "holds_full_blocks runs with policy blocks)")

    def refuse_rule(self, rule: Any) -> str | None:
        """Why this policy does not run with ``rule`` (None: the policy's own rule); None = it does."""
        return None

    def refuse_lengths(self, gen_length: int, block_length: int) -> str | None:
        """Why this policy does not run at these lengths (both >= 1, gen_length a multiple); None = it does."""
        return None

    def refuse_cache(self, cache: Any) -> str | None:
        """Why this policy does not run with ``cache``; None = it does."""
        return None

    def refuse_cfg(self, cfg_scale: float) -> str | None:
        """Why this policy does not run with classifier-free guidance ``cfg_scale``; None = it does."""
        return None

    def check_combination(self, rule: Any, cache: Any, *, gen_length: int, block_length: int,
                          cfg_scale: float = 0.0) -> None:
        for refusal in (lambda: self.refuse_rule(rule), lambda: self.refuse_lengths(gen_length, block_length),
                        lambda: self.refuse_cache(cache), lambda: self.refuse_cfg(cfg_scale)):
            message = refusal()
            if message is not None:
                raise ValueError(message)

    def check_measure(self, given: str) -> None:
        if self.measure is not None and given != self.measure:
            raise ValueError(f"policy {self.name!r} uses confidence {self.measure!r}, got {given!r}")

    def check_model(self, config: Any) -> None:
        if self.unshifted_logits:
            refuse_shifted_logits(self.name, config)

    def place_prompt(self, state: Any, prompt_mask: torch.Tensor, config: Any) -> None:
        return None


POLICIES = Registry("policy", prepare=lambda cls, params: cls.prepare(params))
register = POLICIES.register  # class decorator: add a policy dataclass to ``POLICIES`` under its name
policy_parameters = POLICIES.parameters
policy_defaults = POLICIES.defaults
build_policy = POLICIES.build
