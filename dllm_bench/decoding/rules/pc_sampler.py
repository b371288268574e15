"""PC-Sampler (position-aware calibration): rank the block's masked positions by
exp(-lambd * (i - block start)) * min(-p * log(p_ref(x) + 1e-9), alpha) and commit the policy's fixed count.

Published code: NEUIR/PC-Sampler ``src/generate.py`` ``generate_with_pc_sampler`` / ``pc_sampler_function`` /
``load_baseline``. p is the top-1 probability of the softmax in the logits' dtype, x its token; p_ref is the token's
frequency in a reference corpus: a JSON ``{"num_token": N, "p_baseline_dict": {id: count}}`` (the repository's
``data/baseline/reference_corpus.json`` for LLaDA), count / N as float32, 1 / N for an id the corpus lacks; the
score is computed in float32 and positions count from the current block's start (= the prompt end at the
published block_length = gen_length). Every published script runs lambd 0.25, alpha 10 (Sudoku lambd 0,
Countdown 1), steps = gen_length = block_length: one token per step.

``reference_corpus`` "tiny_llada" / "tiny_dream": the tiny checkpoints' tables (``dllm_bench/tiny/pc_sampler/``,
counted with their tokenizer over the chat-templated puzzles and answers of the shipped Sudoku test set by
:mod:`dllm_bench.tiny.reference_corpus`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import ClassVar

import torch

from dllm_bench.decoding.commit_masks import topk_commit_mask
from dllm_bench.decoding.rules.base import RuleBase, StepContext, register

TINY_TABLES = Path(__file__).resolve().parents[2] / "tiny" / "pc_sampler"  # written by dllm_bench.tiny.reference_corpus
TINY = ("tiny_llada", "tiny_dream")
LOG_EPS = 1e-9  # the published log(p_ref + 1e-9)


@cache
def reference_table(corpus: str) -> tuple[torch.Tensor, float]:
    """(p_ref per token id up to the corpus's largest id, float32; p_ref of any other id = 1 / N)."""
    path = TINY_TABLES / f"{corpus}.json" if corpus in TINY else Path(corpus)
    if not path.is_file():
        raise ValueError(f"pc_sampler reference_corpus {corpus!r} is not a file nor one of {TINY}")
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or "num_token" not in data or "p_baseline_dict" not in data:
        raise ValueError(f"pc_sampler reference_corpus {corpus!r} is not PC-Sampler's format "
                         '{"num_token": N, "p_baseline_dict": {id: count}}')
    total = data["num_token"]
    counts = {int(k): v for k, v in data["p_baseline_dict"].items()}
    size = max(counts, default=-1) + 1
    table = torch.full((size,), 1 / total, dtype=torch.float32)
    if counts:
        keys = torch.tensor(list(counts), dtype=torch.long)
        table.scatter_(0, keys, torch.tensor([c / total for c in counts.values()], dtype=torch.float32))
    return table, 1 / total


@register
@dataclass(frozen=True)
class PCSampler(RuleBase):
    """PC-Sampler with its scripts' lambd 0.25 and alpha 10; a fixed count per step (policy 'blocks' steps)."""

    lambd: float = 0.25
    alpha: float = 10.0
    reference_corpus: str = "tiny_llada"
    name: ClassVar[str] = "pc_sampler"
    adaptive: ClassVar[bool] = False

    def check(self) -> None:
        if self.lambd < 0 or not self.alpha > 0:
            raise ValueError(f"pc_sampler needs lambd >= 0 and alpha > 0, got lambd {self.lambd}, alpha {self.alpha}")
        if self.reference_corpus not in TINY and not Path(self.reference_corpus).is_file():
            raise ValueError(f"pc_sampler reference_corpus {self.reference_corpus!r} is not a file nor one of {TINY}")

    def check_combination(self, *, policy, cache, gen_length: int, block_length: int) -> None:
        if getattr(policy, "name", None) != "blocks":
            raise ValueError(f"rule 'pc_sampler' ranks the positions of a block of policy 'blocks', got policy "
                             f"{policy.name!r}")
        if policy.steps is None:
            raise ValueError("rule 'pc_sampler' needs a fixed-step schedule: policy 'blocks' with steps (an integer)")

    def score(self, ctx: StepContext) -> torch.Tensor:
        """The calibrated, position-decayed score of every answer position (float32, -inf off candidates)."""
        table, missing = reference_table(self.reference_corpus)
        table = table.to(ctx.prediction.device)
        ids = ctx.prediction
        p_ref = torch.where(ids < table.shape[0], table[ids.clamp(0, table.shape[0] - 1)],
                            torch.full_like(table[:1], missing))
        calibrated = (-ctx.confidence.to(torch.float32) * torch.log(p_ref + LOG_EPS)).clamp(max=self.alpha)
        G = ids.shape[1]
        block_lo = ctx.block[0] if ctx.block is not None else torch.zeros(ids.shape[0], dtype=torch.long,
                                                                             device=ids.device)
        offset = (torch.arange(G, device=ids.device).unsqueeze(0) - block_lo.unsqueeze(1)).to(torch.float32)
        score = torch.exp(-self.lambd * offset) * calibrated
        return torch.where(ctx.candidates, score, float("-inf"))

    def commit(self, ctx: StepContext) -> torch.Tensor:
        return topk_commit_mask(self.score(ctx), ctx.candidates, ctx.quota)
