"""Token-count schedules and confidence measures."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.decoding.confidence import candidate_predictions, resolve_precision
from dllm_bench.decoding.schedules import (
    dream_transfer_count,
    dream_transfer_probability,
    llada_transfer_counts,
)

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


def test_llada_schedule_spreads_remainder_over_first_steps():
    assert llada_transfer_counts(torch.tensor([10]), 4).tolist() == [[3, 3, 2, 2]]
    assert llada_transfer_counts(torch.tensor([32, 5]), 32).tolist()[1] == [1] * 5 + [0] * 27
    assert llada_transfer_counts(torch.tensor([32]), 8).sum().item() == 32
    with pytest.raises(ValueError, match="steps per block"):
        llada_transfer_counts(torch.tensor([4]), 0)


def test_dream_counts_follow_linspace_timesteps_and_flush_at_last_step():
    steps = 4  # t = 1, 0.75025, 0.5005, 0.25075, 0.001
    times = [1.0, 0.75025, 0.5005, 0.25075, 0.001]
    masks = torch.tensor([16, 16, 16, 16])
    got = dream_transfer_count(masks, torch.arange(4), steps)
    expected = [int(16 * (1 - times[i + 1] / times[i])) for i in range(3)] + [16]
    assert got.tolist() == expected
    p = dream_transfer_probability(torch.tensor([0, 3]), steps)
    assert abs(p[0].item() - (1 - 0.75025)) < 1e-6 and p[1].item() == 1.0


def _counts_logits():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    return logits


def test_confidence_measures_hand_values():
    logits = _counts_logits()
    p = torch.softmax(logits.double(), dim=-1)
    x0, top1 = candidate_predictions(logits, [3])
    assert x0.tolist() == [0, 2, 0]
    assert torch.allclose(top1, p.max(dim=-1).values)
    _, margin = candidate_predictions(logits, [3], measure="margin")
    top2 = p.topk(2).values
    assert torch.allclose(margin, top2[:, 0] - top2[:, 1])
    _, neg_ent = candidate_predictions(logits, [3], measure="neg_entropy")
    assert torch.allclose(neg_ent, (p * p.log()).sum(-1))
    assert neg_ent[2].item() == pytest.approx(-torch.log(torch.tensor(4.0)).item())


def test_confidence_precision_and_forbidden_tokens():
    logits = _counts_logits().to(torch.bfloat16)
    _, c64 = candidate_predictions(logits, [3], dtype=torch.float64)
    _, cbf = candidate_predictions(logits, [3], dtype=resolve_precision("model", logits.dtype))
    assert c64.dtype == torch.float64 and cbf.dtype == torch.bfloat16
    x0, _ = candidate_predictions(logits, [3], forbidden_token_ids=[0, 2])
    assert 0 not in x0.tolist() and 2 not in x0.tolist()
    with pytest.raises(ValueError, match="precision"):
        resolve_precision("float8", torch.float32)


def test_noise_comes_from_each_rows_generator():
    """Gumbel and random draws of a row depend only on that row's generator (batch == alone)."""
    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(3))

    def gens(*seeds):
        return [torch.Generator().manual_seed(s) for s in seeds]

    x_batch, c_batch = candidate_predictions(logits, [2, 3], temperature=1.0, measure="random", generators=gens(1, 2))
    x_a, c_a = candidate_predictions(logits[:2], [2], temperature=1.0, measure="random", generators=gens(1))
    x_b, c_b = candidate_predictions(logits[2:], [3], temperature=1.0, measure="random", generators=gens(2))
    assert torch.equal(x_batch, torch.cat([x_a, x_b])) and torch.equal(c_batch, torch.cat([c_a, c_b]))
    # high temperature actually changes choices against argmax for some seed
    hot = [candidate_predictions(logits, [5], temperature=5.0, generators=gens(s))[0] for s in range(5)]
    assert any(not torch.equal(h, logits.argmax(-1)) for h in hot)
