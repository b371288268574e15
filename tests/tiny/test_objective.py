"""LLaDA's masked-diffusion SFT objective: masking rate, kept prompt, 1/p weighting, posterior targets."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dllm_bench.tasks.sudoku_puzzles import completions, parse_puzzle
from dllm_bench.tiny.encoding import encode_batch, posterior_answer_targets
from dllm_bench.tiny.model_setup import build_tiny_model, build_tiny_tokenizer
from dllm_bench.tiny.objective import load_balancing_loss, mask_answers, masked_diffusion_loss


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


def test_soft_targets_give_the_expected_hard_target_loss():
    """CE against a target distribution = the mean of the CEs against ids drawn from it (same 1/p weighting)."""
    torch.manual_seed(1)
    logits = torch.randn(1, 3, 5)
    masked = torch.tensor([[True, True, False]])
    p = torch.tensor([[0.4]])
    probs = torch.tensor([[[0.0, 0.25, 0.75, 0.0, 0.0], [0, 0, 0, 1.0, 0], [1.0, 0, 0, 0, 0]]])
    expected = sum(
        w * masked_diffusion_loss(logits, torch.tensor([[a, 3, 0]]), masked, p) for a, w in ((1, 0.25), (2, 0.75))
    )
    assert torch.allclose(masked_diffusion_loss(logits, probs, masked, p), expected)


@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_posterior_targets_are_the_marginals_over_completions_agreeing_with_visible_cells(flavour):
    tok = build_tiny_tokenizer(flavour)
    cfg = build_tiny_model(flavour, tok, d_model=8, n_layers=1, n_heads=2, mlp_hidden_size=8).config
    puzzle, answer = "1.../..../..../...2", "1234342121434312"
    all_valid = completions(parse_puzzle(puzzle))
    assert len(all_valid) > 2 and answer in {"".join(map(str, g)) for g in all_valid}
    _, ids = encode_batch(tok, cfg, [puzzle], [answer], 24)
    masked = torch.ones(1, 24, dtype=torch.bool)
    masked[0, [1, 4]] = False  # cells 1 and 4 stay visible (digits 2 and 3)
    targets = posterior_answer_targets(tok, [puzzle], ids, masked, cfg.vocab_size)
    agree = all_valid[(all_valid[:, 1] == 2) & (all_valid[:, 4] == 3)]
    digits = tok.convert_tokens_to_ids(list("1234"))
    for cell in range(16):
        want = np.array([(agree[:, cell] == d).mean() for d in range(1, 5)])
        assert np.allclose(targets[0, cell, digits].numpy(), want)
    assert torch.allclose(targets.sum(-1), torch.ones(1, 24))
    assert torch.equal(targets[0, 16:].argmax(-1), ids[0, 16:])  # end tokens: the answer's own
    # a unique-solution state gives one-hot targets equal to the answer ids
    none_masked = posterior_answer_targets(tok, [puzzle], ids, torch.zeros_like(masked), cfg.vocab_size)
    assert torch.equal(none_masked.argmax(-1), ids) and torch.equal(none_masked.max(-1).values, torch.ones(1, 24))


def test_load_balancing_loss_matches_a_per_token_reference():
    """E * sum_slot,expert share * mean prob, written token by token; uniform routing gives one per slot."""
    torch.manual_seed(2)
    layers = [torch.randn(7, 4), torch.randn(5, 4)]
    probs = torch.softmax(torch.cat(layers), dim=-1)
    n, e, k = probs.shape[0], 4, 2
    share = torch.zeros(k, e)
    for row in probs:
        for slot, expert in enumerate(row.topk(k).indices.tolist()):
            share[slot, expert] += 1.0 / n
    expected = e * sum(share[s, x] * probs[:, x].mean() for s in range(k) for x in range(e))
    assert torch.allclose(load_balancing_loss(layers, e, k), expected)
    # every expert chosen equally often in each slot with equal mean probability: k
    uniform = [torch.tensor([[2.0, 1.0, 0.0, 0.0], [0.0, 2.0, 1.0, 0.0], [0.0, 0.0, 2.0, 1.0], [1.0, 0.0, 0.0, 2.0]])]
    assert torch.allclose(load_balancing_loss(uniform, 4, 2), torch.tensor(2.0))
