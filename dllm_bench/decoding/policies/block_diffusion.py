"""Block diffusion on the absolute block grid (Fast-dLLM v2, SDAR, LLaDA2.0): the answer is decoded block by block,
blocks tiling the row's positions 0, B, 2B, ... from its first prompt token (the prompt's last partial block is
completed first); inside a block, sub-block by sub-block (Fast-dLLM v2's sub-blocks of 8). A block-causal model
attends on the decoder's blocks (``block_length``), whatever block size it was trained at, as the published loops
build their masks from theirs.

Storage (``kv_cache``): ``committed`` keeps the K/V of finished blocks (:class:`~dllm_bench.models.cache.
CommittedBlockCache`): a block with no masks left is written by one extra forward over it (SDAR's ``store_kv``,
Fast-dLLM v2's ``update_past_key_values``), which for a shifted model (logits at i predict token i + 1) also gives
the next block's first token, greedily, from its last position; the prompt's full blocks are written the same way
before the first block. ``none`` recomputes the canvas up to the current block's end every step (LLaDA2.0's
``generate``). Under ``committed`` the rows at one committed end share a storage; a row whose block ends earlier
goes on with a copy of its K/V, so every row decodes as it does alone.

Commit rule: the configured one, or with ``rule=none`` the policy's own: without ``steps`` every masked candidate
of the sub-block with p > threshold and at least the most confident (Fast-dLLM v2); with ``steps`` (per block) every
candidate above the threshold if they are at least the scheduled count k (block_length / steps, the remainder first), else
the k most confident (SDAR's ``low_confidence_dynamic``, LLaDA2.0's threshold with ``minimal_topk``).

``stop_after_block``: a row ends after the block that leaves a stop token in its answer (LLaDA2.0's ``generate``
always does).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from dllm_bench.decoding.commit_masks import prefix_commit_mask, sort_candidates
from dllm_bench.decoding.forward import ForwardResult
from dllm_bench.decoding.policies.base import (
    PolicyBase,
    advance_and_stop_after_block,
    is_positive_int,
    register,
    span_mask,
)
from dllm_bench.decoding.rules.base import StepContext, rule_tokens
from dllm_bench.decoding.schedules import llada_transfer_counts
from dllm_bench.models.cache import CommittedBlockCache

KV_CACHES = ("committed", "none")
# the published loops' settings (conf/policy/<name>.yaml; block_length = the model's trained block size, 32 for Fast-dLLM v2
# and LLaDA2.0, 4 in SDAR's README): Fast-dLLM v2's batch_sample (sub-blocks of 8, tau 0.95), SDAR's README
# (steps 4, tau 0.9), LLaDA2.0's generate (steps 32, threshold 0.95, no K/V cache)
PRESETS: dict[str, dict[str, Any]] = {
    "fast_dllm_v2": {"sub_block": 8, "threshold": 0.95},
    "sdar": {"steps": 4, "threshold": 0.9},
    "llada2": {"steps": 32, "threshold": 0.95, "kv_cache": "none", "stop_after_block": True},
}


@dataclass
class BlockDiffusionState:
    """Per-row progress ([B] tensors) of :class:`BlockDiffusionPolicy`, and its committed-block storage."""

    block_length: int
    sub_length: int
    gen_length: int
    block: torch.Tensor  # grid block index, counted from the block holding answer position 0
    sub: torch.Tensor  # index of the current sub-block inside the block
    step_in_block: torch.Tensor  # denoising steps taken in the current block
    storing: torch.Tensor  # [B] bool: the previous block's K/V are written by this step's forward
    offset: torch.Tensor  # [B] long: answer position 0's place in its block (real prompt length mod block_length)
    commit_counts: torch.Tensor | None = None  # [steps] scheduled count per denoising step of a block
    offsets: list[int] = field(default_factory=list)  # ``offset`` on the host
    shift: bool = False  # the model's logits predict the next token (the store forward gives a block's first token)
    attention_blocks: dict[str, int] = field(default_factory=dict)  # block_size for a block-causal model's forwards
    # committed-block storages, each with the global rows it holds in its order: rows at one committed end
    cohorts: list[tuple[CommittedBlockCache, list[int]]] = field(default_factory=list)


@register
@dataclass(frozen=True)
class BlockDiffusionPolicy(PolicyBase):
    """Block diffusion on the absolute block grid with a committed-block K/V cache (Fast-dLLM v2, SDAR, LLaDA2.0)."""

    sub_block: int | None = None
    steps: int | None = None
    threshold: float = 0.9
    kv_cache: str = "committed"
    stop_after_block: bool = False
    # SDAR's low_confidence_dynamic as published: with fewer masks left in the block than the step's count k, its
    # top-k over the whole block also takes committed positions and rewrites them with their prediction
    sdar_topk: bool = False
    name: ClassVar[str] = "block_diffusion"
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = PRESETS
    sync_budget: ClassVar[int] = 4  # the engine's 3 and the candidates' count for the LM head
    blocks_from_answer: ClassVar[bool] = False

    def check(self) -> None:
        if self.sub_block is not None and not is_positive_int(self.sub_block):
            raise ValueError(f"{self.name} sub_block must be an integer >= 1 or None, got {self.sub_block!r}")
        if self.steps is not None and not is_positive_int(self.steps):
            raise ValueError(f"{self.name} steps must be an integer >= 1 or None, got {self.steps!r}")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) or not 0 <= self.threshold <= 1:
            raise ValueError(f"{self.name} threshold must be in [0, 1], got {self.threshold!r}")
        if self.kv_cache not in KV_CACHES:
            raise ValueError(f"{self.name} kv_cache must be one of {', '.join(KV_CACHES)}, got {self.kv_cache!r}")
        if not isinstance(self.stop_after_block, bool):
            raise ValueError(f"{self.name} stop_after_block must be true or false, got {self.stop_after_block!r}")
        if self.sdar_topk and self.steps is None:
            raise ValueError(f"{self.name} sdar_topk is SDAR's scheduled top-k: it needs steps (per block), got "
                             "steps=None")

    def ends_rows_early(self) -> str | None:
        return f"{self.name} stop_after_block" if self.stop_after_block else None

    def refuse_rule(self, rule: Any) -> str | None:
        if rule is None:
            return None
        if rule.adaptive and not rule.takes_steps and self.steps is not None:
            return (f"rule {rule.name!r} is adaptive (a sub-block runs until full): policy {self.name!r} needs "
                    f"steps=None, got steps={self.steps}")
        if not rule.adaptive and self.steps is None:
            return (f"rule {rule.name!r} commits a scheduled count: policy {self.name!r} needs steps (per block), "
                    f"got steps=None")
        if rule.plans:
            return f"rule {rule.name!r} plans its order over the whole canvas: policy {self.name!r} decodes by blocks"
        if self.sdar_topk:
            return f"policy {self.name!r} with sdar_topk commits by SDAR's own rule: run it with rule=none, got {rule.name!r}"
        return None

    def refuse_lengths(self, gen_length: int, block_length: int) -> str | None:
        if self.sub_block is not None and block_length % self.sub_block:
            return f"block_length {block_length} is not a multiple of {self.name} sub_block {self.sub_block}"
        if self.steps is not None and self.steps > block_length:
            return f"{self.name} steps {self.steps} (per block) exceed block_length {block_length}"
        return None

    def refuse_cache(self, cache: Any) -> str | None:
        if cache is not None and cache.name != "none":
            return (f"policy {self.name!r} keeps its own K/V (kv_cache: committed or none); run it with cache=none, "
                    f"got cache={cache.name!r}")
        return None

    def refuse_cfg(self, cfg_scale: float) -> str | None:
        return f"policy {self.name!r} runs without classifier-free guidance (cfg_scale 0), got {cfg_scale}" if cfg_scale else None

    # ------------------------------------------------------------------ progress

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> BlockDiffusionState:
        zeros = torch.zeros(batch, dtype=torch.long, device=device)
        state = BlockDiffusionState(block_length, self.sub_block or block_length, gen_length, block=zeros.clone(),
                                    sub=zeros.clone(), step_in_block=zeros.clone(),
                                    storing=torch.zeros(batch, dtype=torch.bool, device=device), offset=zeros.clone())
        if self.steps is not None:
            state.commit_counts = llada_transfer_counts(torch.tensor([block_length], device=device), self.steps)[0]
        return state

    def place_prompt(self, state: BlockDiffusionState, prompt_mask: torch.Tensor, config: Any) -> None:
        bs = state.block_length
        if getattr(config, "attention", "full") == "block_causal":
            # attention at the decoder's blocks, as the published loops build their masks from block_length (a
            # model trained at block_size 4 runs at 8 there too)
            state.attention_blocks = {"block_size": bs}
        state.offset = prompt_mask.sum(dim=1).to(torch.long) % bs
        state.sub = state.offset // state.sub_length
        state.shift = bool(getattr(config, "shift_logits", False))
        if self.kv_cache == "committed":
            state.offsets = state.offset.tolist()  # one read a decode
            # the prompt's full blocks (and its left padding) are written first; a shifted model's last prompt
            # state gives answer 0 when the prompt ends on a block boundary
            state.storing = prompt_mask.shape[1] - state.offset > 0

    def _bounds(self, state: BlockDiffusionState, block: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        bs, G = state.block_length, state.gen_length
        lo = (block * bs - state.offset).clamp(0, G)
        return lo, ((block + 1) * bs - state.offset).clamp(0, G)

    def block(self, state: BlockDiffusionState) -> tuple[torch.Tensor, torch.Tensor]:
        return self._bounds(state, state.block)

    def window(self, state: BlockDiffusionState) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = self.block(state)
        grid_lo = state.block * state.block_length - state.offset
        sub_lo = (grid_lo + state.sub * state.sub_length).clamp(lo, hi)
        sub_hi = (grid_lo + (state.sub + 1) * state.sub_length).clamp(lo, hi)
        # a store step reads the new block's first position (a shifted model predicts it there), or nothing
        first = torch.where(grid_lo == lo, torch.minimum(lo + 1, hi), lo) if state.shift else lo
        return torch.where(state.storing, lo, sub_lo), torch.where(state.storing, first, sub_hi)

    def decide(self, state: BlockDiffusionState, ctx: StepContext, rule) -> tuple[torch.Tensor, torch.Tensor]:
        cand = ctx.candidates
        k = None
        if self.steps is not None:
            last = state.step_in_block >= self.steps - 1
            k = state.commit_counts[state.step_in_block.clamp(max=self.steps - 1)]
            k = torch.where(last, cand.sum(dim=1), k)  # a block's last step commits what is left
            ctx.last_step = last
        ctx.quota = k
        if rule is None:
            commit, tokens = self._own_commit(ctx.confidence, cand, k), ctx.prediction
        else:
            commit, tokens = rule.commit(ctx), rule_tokens(rule, ctx)
        # a store step commits the new block's first token greedily
        commit = torch.where(state.storing.unsqueeze(1), cand, commit)
        return commit, torch.where(state.storing.unsqueeze(1), ctx.prediction, tokens)

    def _own_commit(self, conf: torch.Tensor, cand: torch.Tensor, k: torch.Tensor | None) -> torch.Tensor:
        above = cand & (conf > self.threshold)
        if k is None:  # Fast-dLLM v2: above the threshold, and the most confident (the first of equals)
            first = torch.zeros_like(cand).scatter_(1, conf.argmax(dim=1, keepdim=True), True)
            return (above | first) & cand
        n_above, n_cand = above.sum(dim=1), cand.sum(dim=1)
        count = torch.where(n_above >= k, n_above, k.minimum(n_cand))
        _, order, _ = sort_candidates(conf, cand)
        return prefix_commit_mask(order, count) & cand

    def read(self, state: BlockDiffusionState, read: torch.Tensor, masked: torch.Tensor,
             active: torch.Tensor) -> torch.Tensor:
        if not self.sdar_topk:
            return read
        lo, hi = self.block(state)  # SDAR's top-k may pick a committed position of the block: its prediction too
        return read | (span_mask(lo, hi, read.shape[1]) & (active & ~state.storing).unsqueeze(1))

    def revise(self, state: BlockDiffusionState, ctx: StepContext, answer: torch.Tensor, active: torch.Tensor,
               mask_id: int) -> torch.Tensor | None:
        """``sdar_topk``: where fewer masks than the step's scheduled k were left, the published ``topk(k)`` over
        the block's confidences (-inf off the masks) also picks k - masks committed positions, in torch.topk's
        order of equal values, and rewrites them with their prediction (a prompt position it picks is left
        as is: there it would rewrite the prompt)."""
        if not self.sdar_topk:
            return None
        bs, G = state.block_length, answer.shape[1]
        k = state.commit_counts[state.step_in_block.clamp(max=self.steps - 1)]
        grid = (state.block * bs - state.offset).unsqueeze(1) + torch.arange(bs, device=answer.device)  # [B, bs]
        inside = (grid >= 0) & (grid < G)
        at = grid.clamp(0, G - 1)
        was_masked = ctx.masked.gather(1, at) & inside
        short = active & ~state.storing & (was_masked.sum(dim=1) < k)
        if not bool(short.any()):  # a host read, under this switch only
            return torch.zeros_like(ctx.masked)
        conf = torch.where(was_masked, ctx.read_confidence.gather(1, at), float("-inf"))
        picked = torch.zeros_like(was_masked)
        for b in short.nonzero().squeeze(1).tolist():  # the published loop's per-row topk, with its own k
            picked[b, torch.topk(conf[b], int(k[b])).indices] = True
        rewrite = picked & ~was_masked & inside & short.unsqueeze(1)
        edit = torch.zeros_like(answer).scatter_add_(1, at, rewrite.to(answer.dtype)) > 0  # clamped indices repeat
        answer.copy_(torch.where(edit, ctx.read_prediction, answer))
        return edit

    def advance(self, state: BlockDiffusionState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        G, bs, sl = state.gen_length, state.block_length, state.sub_length
        was_storing = state.storing & active
        state.step_in_block += (active & ~was_storing).long()
        lo, hi = self.block(state)
        left = masked & span_mask(lo, hi, G)
        full = ~left.any(dim=1) & active & ~was_storing
        last = hi >= G
        state.block += (full & ~last).long()
        state.step_in_block = torch.where(full, 0, state.step_in_block)
        state.storing = (full & ~last) if self.kv_cache == "committed" else torch.zeros_like(full)
        # the current sub-block: the one holding the block's first masked position (a store step: the first one)
        lo, hi = self.block(state)
        grid_lo = state.block * bs - state.offset
        j = torch.arange(G, device=masked.device).unsqueeze(0)
        first_masked = torch.where(masked & span_mask(lo, hi, G), j, G).min(dim=1).values
        state.sub = torch.where(first_masked < G, first_masked - grid_lo, lo - grid_lo) // sl
        return full & last

    def finished(self, state: BlockDiffusionState, answer: torch.Tensor, masked: torch.Tensor, active: torch.Tensor,
                 stop_id: int | None) -> torch.Tensor:
        return advance_and_stop_after_block(self, state, answer, masked, active, stop_id)

    # ------------------------------------------------------------------ forwards

    def forward(self, state: BlockDiffusionState, runner: Any, x: torch.Tensor, rows: torch.Tensor,
                read: torch.Tensor, view: Any) -> list:
        P, model = runner.P, runner.model
        sub_read = read.index_select(0, rows)  # a copy: positions outside the forward's span are dropped
        mask = None if runner.mask is None else runner.mask.index_select(0, rows)
        inp = x.index_select(0, rows)
        end = P + max(view.block_hi[r] for r in view.rows)
        sub_read[:, end - P:] = False
        if self.kv_cache == "none":
            at = sub_read.nonzero(as_tuple=True)  # the step's one read: how many rows the LM head runs on
            # a row whose block ends before the batch's furthest sees no key past it (as alone; a full-attention
            # model would otherwise attend to the masks of the later blocks it has not reached)
            ends = torch.tensor([P + view.block_hi[r] for r in view.rows], device=inp.device)
            keys = (torch.arange(end, device=inp.device).unsqueeze(0) < ends.unsqueeze(1)).long()
            logits = model(inp[:, :end], attention_mask=keys if mask is None else mask[:, :end] * keys,
                           logits_at=(at[0], at[1] + P), **state.attention_blocks)
            counted = runner.prompt_real.index_select(0, rows) + (end - P)
            return [ForwardResult(rows, logits, 0, False, counted, at)]
        return [self._cohort_forward(state, runner, x, cohort, view, read)
                for cohort in self._cohorts(state, rows, view, P)]

    def _cohort_forward(self, state: BlockDiffusionState, runner: Any, x: torch.Tensor,
                        cohort: tuple[CommittedBlockCache, list[int], torch.Tensor, int], view: Any,
                        read: torch.Tensor) -> ForwardResult:
        """One forward of the rows at one committed end: the store of their finished block, or a denoising step."""
        storage, host_rows, rows, grid_lo = cohort
        P, model = runner.P, runner.model
        mask = None if runner.mask is None else runner.mask.index_select(0, rows)
        inp = x.index_select(0, rows)
        committed = storage.committed
        if committed < grid_lo:  # write the finished block (or the prompt's full blocks) before going on
            storage.commit_next()
            logits = model(inp[:, committed:grid_lo], attention_mask=None if mask is None else mask[:, :grid_lo],
                           cache=storage, start=committed, raw_logits=True, logits_range=(grid_lo - 1, grid_lo),
                           **state.attention_blocks)
            counted = torch.full((rows.numel(),), grid_lo - committed, dtype=torch.long, device=rows.device)
            # the last state's logits stand at the next position (a shifted model's prediction of it)
            return ForwardResult(rows, logits, grid_lo, False, counted)
        end = P + max(view.block_hi[r] for r in host_rows)
        sub_read = read.index_select(0, rows)  # a copy: positions outside the forward's span are dropped
        sub_read[:, end - P:] = False
        sub_read[:, : max(committed - P, 0)] = False
        at = sub_read.nonzero(as_tuple=True)  # the step's one read: how many rows the LM head runs on
        logits = model(inp[:, committed:end], attention_mask=None if mask is None else mask[:, :end], cache=storage,
                       start=committed, logits_at=(at[0], at[1] + P), **state.attention_blocks)
        shift = int(state.shift and committed > 0)
        counted = torch.full((rows.numel(),), end - committed + shift, dtype=torch.long, device=rows.device)
        return ForwardResult(rows, logits, 0, False, counted, at)

    @staticmethod
    def _cohorts(state: BlockDiffusionState, rows: torch.Tensor, view: Any, P: int) -> list[tuple[CommittedBlockCache, list[int], torch.Tensor, int]]:
        """The storages of the active rows, split where their current blocks start at different canvas positions
        (a row goes on alone, with a copy of its stored K/V, exactly as it would decode alone)."""
        if not state.cohorts:
            state.cohorts = [(CommittedBlockCache(), list(view.rows))]
        active = set(view.rows)
        out, kept = [], []
        for storage, held in state.cohorts:
            groups: dict[int, list[int]] = {}
            for r in held:
                if r in active:
                    lo = view.block_lo[r]
                    groups.setdefault(P + (lo - state.offsets[r] if lo == 0 else lo), []).append(r)
            for n, (start, members) in enumerate(groups.items()):
                part = storage if n == len(groups) - 1 else copy.copy(storage)
                if members != held:
                    part.keep_rows(torch.tensor([held.index(r) for r in members], dtype=torch.long,
                                                device=rows.device))
                kept.append((part, members))
                out.append((part, members, rows.new_tensor(members), start))
        state.cohorts = kept
        return out
