"""Running the LM head on the candidates' window only (our networks' ``logits_range``) changes no token or NFE."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dllm_bench.tiny
from dllm_bench.decoding import build_cache, build_policy, build_selector
from dllm_bench.models import DiffusionLM, load_model
from dllm_bench.tasks.sudoku import SudokuTask
from dllm_bench.tiny.encoding import encode_batch

from .spec_kwargs import spec_generate

TINY = Path(dllm_bench.tiny.__file__).parent / "checkpoints" / "tiny_llada"


@pytest.mark.parametrize("cache", ["none", "prefix", "dual", "dllm"])
def test_window_head_equals_full_head(cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model(TINY)
    rows = SudokuTask(limit=12).docs()
    prompts, _ = encode_batch(model.tokenizer, model.config, [r["puzzle"] for r in rows],
                              [r["solution"] for r in rows], 24)
    outs = []
    for window in (True, False):
        monkeypatch.setattr(DiffusionLM, "accepts_logits_range", window)
        outs.append(spec_generate(model, prompts, torch.ones_like(prompts), gen_length=24, block_length=8,
                                  policy=build_policy("blocks"), selector=build_selector("frechet", delta=0.25),
                                  cache=build_cache(cache)))
    assert torch.equal(outs[0].tokens, outs[1].tokens)
    assert [r.nfe for r in outs[0].records] == [r.nfe for r in outs[1].records]
