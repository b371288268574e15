"""The confidence over many rows, taken in chunks of rows (the memory bound for whole-answer windows), has the bits
of the one-piece computation, for every measure and precision; the accelerator's route (no host reads) too."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.decoding.confidence import Workspace, candidate_predictions
from dllm_bench.models.host import accelerator_path


def _logits(rows: int, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, vocab, generator=g) * 6
    x[::5, 7] = x[::5].amax(dim=1) + 1  # rows whose max is the forbidden id (the masked re-max path)
    x[1, :] = 0.0  # a row of ties
    x[2] *= 200  # extreme logits: the float64 shift by the max
    return x.to(dtype)


@pytest.mark.parametrize("measure", ["top1_prob", "margin", "neg_entropy"])
@pytest.mark.parametrize("dtype,precision", [(torch.float32, torch.float64), (torch.float32, torch.float32),
                                             (torch.bfloat16, torch.float64), (torch.bfloat16, torch.bfloat16)])
def test_chunked_confidence_equals_the_one_piece_one(measure, dtype, precision):
    logits = _logits(37, 512, dtype)
    kwargs = dict(measure=measure, dtype=precision, forbidden_token_ids=(7,), unchosen_token_ids=(9,))
    whole = candidate_predictions(logits, [37], chunk_rows=10**6, workspace=Workspace(), **kwargs)
    for rows in (1, 5, 16):
        chunked = candidate_predictions(logits, [37], chunk_rows=rows, workspace=Workspace(), **kwargs)
        assert torch.equal(chunked[0], whole[0]) and torch.equal(chunked[1], whole[1])
    with accelerator_path():
        other = candidate_predictions(logits, [37], chunk_rows=8, workspace=Workspace(), **kwargs)
    assert torch.equal(other[0], whole[0]) and torch.equal(other[1], whole[1])
