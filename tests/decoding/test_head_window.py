"""Running the LM head at the candidates only (our networks' ``logits_at``) or on their window (``logits_range``)
changes no token or NFE."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dllm_bench.tiny
from dllm_bench.decoding import build_cache, build_policy, build_rule
from dllm_bench.models import DiffusionLM, load_model
from dllm_bench.tasks.sudoku import SudokuTask
from dllm_bench.tiny.encoding import encode_batch

from .spec_kwargs import spec_generate

pytestmark = pytest.mark.golden  # bit equality between code paths: checked under every kernel width

CHECKPOINTS = Path(dllm_bench.tiny.__file__).parent / "checkpoints"


@pytest.mark.parametrize("flavour", ["llada", "dream"])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual", "dllm"])
def test_candidate_and_window_heads_equal_the_full_head(flavour: str, cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model(CHECKPOINTS / f"tiny_{flavour}")
    rows = SudokuTask(limit=12).docs()
    prompts, _ = encode_batch(model.tokenizer, model.config, [r["puzzle"] for r in rows],
                              [r["solution"] for r in rows], 24)
    outs = []
    for at, window in ((True, True), (False, True), (False, False)):
        monkeypatch.setattr(DiffusionLM, "accepts_logits_at", at)
        monkeypatch.setattr(DiffusionLM, "accepts_logits_range", window)
        outs.append(spec_generate(model, prompts, torch.ones_like(prompts), gen_length=24, block_length=8,
                                  policy=build_policy("blocks"), rule=build_rule("frechet", delta=0.25),
                                  cache=build_cache(cache)))
    for other in outs[1:]:
        assert torch.equal(outs[0].tokens, other.tokens)
        assert [r.nfe for r in outs[0].records] == [r.nfe for r in other.records]
