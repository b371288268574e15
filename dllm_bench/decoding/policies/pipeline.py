"""Multi-block pipelined decoding (D2F, d3LLM): several blocks of the answer decode at once, each added when the one
before it is far enough along.

A row's answer is a sequence of blocks of ``block_length``. The first is added at the start; after every step the
next is added once the last one's decoded fraction reaches ``block_add_threshold`` (D2F: never again once an EOS
was committed). A block becomes *fully activated* once its predecessor's decoded fraction reaches
``decoded_token_threshold`` (the first at once: the prompt counts as decoded); the others are *semi-activated*.
Every added block's masked positions are candidates of each step; what is committed depends on ``method``:

- ``d2f``: per block, every candidate whose top-1 probability exceeds ``threshold`` (D2F's skip threshold); a fully
  activated block where none does commits its most confident one. The network sees the added blocks only (canvas
  limit), which a block-causal model on the anchored grid (D2F's LoRA) cannot tell from the whole canvas; with cache
  ``committed_blocks`` the blocks before a row's first unfinished one are kept as K/V (D2F's cache).
- ``d3llm``: over all candidates, the least entropic one and every one whose entropy is at most ``threshold``; the
  first fully activated block with masks that got none commits its least entropic one. The network (full
  attention) sees the whole canvas.

A row ends when every added block is decoded and no block can be added (all added, or D2F after an EOS: the
positions never added are returned as the stop id). Presets: ``PIPELINE_PRESETS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.policies.base import PolicyBase, register
from dllm_bench.decoding.rules.base import StepContext

METHODS = ("d2f", "d3llm")
# published settings as changes to PipelinePolicy's defaults (D2F-LLaDA's GSM8K row); conf/policy/pipeline_<preset>.yaml
# selects one (runner/group_defaults)
PIPELINE_PRESETS = {
    # SJTU-DENG-Lab/Discrete-Diffusion-Forcing D2F-eval/eval_llada.sh (gsm8k; block 64, gen 512)
    "d2f_llada": {},
    # D2F-eval/eval_dream.sh (gsm8k_cot; block 32, gen 256)
    "d2f_dream": dict(block_add_threshold=0.1),
    # hao-ai-lab/d3LLM chat/chat_d3llm_llada.py (block 32): entropy threshold 0.5
    "d3llm_llada": dict(method="d3llm", block_add_threshold=0.1),
    # d3LLM's Dream settings: entropy threshold 0.4
    "d3llm_dream": dict(method="d3llm", max_entropy=0.4, block_add_threshold=0.1),
}


@dataclass
class PipelineState:
    """Per-row progress of ``PipelinePolicy`` ([B] long / [B, NB] bool tensors)."""

    block_length: int
    num_blocks: int
    added: torch.Tensor  # blocks added so far
    first_open: torch.Tensor  # blocks before it are decoded (D2F: cached once every earlier one is)
    activated: torch.Tensor  # [B, NB] bool: fully activated
    eos: torch.Tensor  # [B] bool: an EOS was committed (D2F adds no block after one)


@register
@dataclass(frozen=True)
class PipelinePolicy(PolicyBase):
    """D2F's and d3LLM's pipelines of blocks (module docstring); ``method`` says whose commit rule runs: D2F's top-1
    probability above ``threshold``, or d3LLM's entropy at most ``max_entropy`` (nats)."""

    method: str = "d2f"
    block_add_threshold: float = 0.7
    decoded_token_threshold: float = 0.95
    threshold: float = 0.9
    max_entropy: float = 0.5
    name: ClassVar[str] = "pipeline"
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = PIPELINE_PRESETS
    default_preset: ClassVar[str | None] = "d2f_llada"


    @property
    def measure(self) -> str:
        return "top1_prob" if self.method == "d2f" else "neg_entropy"

    def check(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"pipeline method {self.method!r} is not one of {METHODS}")
        for key in ("block_add_threshold", "decoded_token_threshold"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"pipeline {key} must be in [0, 1], got {value}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"pipeline threshold (a top-1 probability) must be in [0, 1], got {self.threshold}")
        if self.max_entropy < 0.0:
            raise ValueError(f"pipeline max_entropy (nats) must be >= 0, got {self.max_entropy}")

    def refuse_rule(self, rule: Any) -> str | None:
        if rule is not None:
            return (f"policy {self.name!r} commits by its own per-block threshold and forced token (method "
                    f"{self.method!r}); rule {rule.name!r} has no place in it: use rule none")
        return None

    def ends_rows_early(self) -> str | None:
        return "an EOS (D2F adds no block after one)" if self.method == "d2f" else None

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> PipelineState:
        num_blocks = gen_length // block_length
        zeros = torch.zeros(batch, dtype=torch.long, device=device)
        state = PipelineState(block_length, num_blocks, added=zeros + 1, first_open=zeros.clone(),
                              activated=torch.zeros(batch, num_blocks, dtype=torch.bool, device=device),
                              eos=torch.zeros(batch, dtype=torch.bool, device=device))
        state.activated[:, 0] = self.decoded_token_threshold <= 1.0  # the prompt is decoded
        return state

    def block(self, state: PipelineState) -> tuple[torch.Tensor, torch.Tensor]:
        """[first unfinished block's start, end of the added blocks): everything before is final."""
        return state.first_open * state.block_length, state.added * state.block_length

    def canvas_limit(self, state: PipelineState) -> torch.Tensor | None:
        return state.added * state.block_length if self.method == "d2f" else None

    def decide(self, state: PipelineState, ctx: StepContext, rule) -> tuple[torch.Tensor, torch.Tensor]:
        B, G = ctx.candidates.shape
        NB, L = state.num_blocks, state.block_length
        cand = ctx.candidates.view(B, NB, L)
        conf = ctx.confidence.view(B, NB, L)
        if self.method == "d2f":
            commit = cand & (conf > self.threshold)
            forced = state.activated & cand.any(-1) & ~commit.any(-1)  # each fully activated block with none above
        else:
            commit = cand & (conf >= -self.max_entropy)  # entropy <= max_entropy
            flat_best = ctx.confidence.argmax(dim=1)  # the least entropic candidate of the row, always committed
            best = torch.zeros_like(ctx.candidates).scatter_(1, flat_best.unsqueeze(1), True) & ctx.candidates
            commit |= best.view(B, NB, L)
            first = state.activated & cand.any(-1)
            first &= torch.cumsum(first.long(), dim=1) == 1  # the first fully activated block with masks
            forced = first & ~commit.any(-1)
        top = torch.zeros_like(cand).scatter_(2, conf.argmax(dim=2, keepdim=True), True)
        commit |= top & forced.unsqueeze(-1)
        return commit.view(B, G) & ctx.candidates, ctx.prediction

    def advance(self, state: PipelineState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        B = masked.shape[0]
        NB, L = state.num_blocks, state.block_length
        index = torch.arange(NB, device=masked.device)
        added = index < state.added.unsqueeze(1)
        left = masked.view(B, NB, L).sum(-1)
        progress = 1.0 - left.double() / L
        done = (left == 0) & added
        state.first_open = torch.where(active, torch.cumprod(done.long(), dim=1).sum(dim=1), state.first_open)
        last = progress.gather(1, (state.added - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        grow = active & (state.added < NB) & (last >= self.block_add_threshold)
        if self.method == "d2f":
            grow &= ~state.eos
        state.added = state.added + grow.long()
        added = index < state.added.unsqueeze(1)
        before = torch.cat([torch.ones_like(progress[:, :1]), progress[:, :-1]], dim=1)  # the prompt: decoded
        state.activated |= added & (before >= self.decoded_token_threshold) & active.unsqueeze(1)
        return (state.first_open >= state.added) & active

    def finished(self, state: PipelineState, answer: torch.Tensor, masked: torch.Tensor, active: torch.Tensor,
                 stop_id: int | None) -> torch.Tensor:
        if self.method == "d2f" and stop_id is not None:
            state.eos |= ((answer == stop_id) & ~masked).any(dim=1) & active
        return self.advance(state, masked, active)
