"""LLaDA's masked-diffusion SFT objective: masking rate, kept prompt, 1/p weighting."""

import pytest
import torch
import torch.nn.functional as F

from dllm_bench.tiny.objective import mask_answers, masked_diffusion_loss


def test_mask_answers_masks_at_rate_p_and_only_with_the_mask_id():
    answers = torch.randint(0, 10, (4000, 24))
    gen = torch.Generator().manual_seed(0)
    noisy, masked, p = mask_answers(answers, 99, eps=1e-3, generator=gen)
    assert p.shape == (4000, 1) and bool(((p >= 1e-3) & (p <= 1)).all())
    assert bool((noisy[masked] == 99).all()) and bool((noisy[~masked] == answers[~masked]).all())
    # per-row masking rate tracks p (binomial noise only)
    assert abs(masked.float().mean().item() - p.mean().item()) < 0.01
    assert torch.corrcoef(torch.stack([masked.float().mean(1), p[:, 0]]))[0, 1] > 0.9


def test_mask_answers_is_deterministic_in_the_generator():
    answers = torch.randint(0, 10, (8, 24))
    a = mask_answers(answers, 99, 1e-3, torch.Generator().manual_seed(5))
    b = mask_answers(answers, 99, 1e-3, torch.Generator().manual_seed(5))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("eps", [0.0, 1.0, -0.1])
def test_bad_eps_is_refused(eps):
    with pytest.raises(ValueError, match=f"eps={eps}"):
        mask_answers(torch.zeros(1, 4, dtype=torch.long), 9, eps)


def test_loss_is_weighted_cross_entropy_on_masked_tokens_over_answer_length():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)
    answers = torch.tensor([[1, 2, 3], [4, 0, 1]])
    masked = torch.tensor([[True, False, True], [False, False, True]])
    p = torch.tensor([[0.5], [0.25]])
    ce = F.cross_entropy(logits.reshape(-1, 5), answers.reshape(-1), reduction="none").view(2, 3)
    row0 = (ce[0, 0] + ce[0, 2]) / 0.5 / 3
    row1 = ce[1, 2] / 0.25 / 3
    expected = (row0 + row1) / 2
    assert torch.allclose(masked_diffusion_loss(logits, answers, masked, p), expected)
    none = torch.zeros_like(masked)
    assert masked_diffusion_loss(logits, answers, none, p).item() == 0.0
