"""The block-diffusion objective: its doubled canvas gives every answer block the logits a single sequence gives
(clean blocks before it, its own noised tokens, nothing after), shifted or not; its posterior targets condition a
cell on its own block's visible cells and the earlier blocks only; the trainer writes a loadable checkpoint."""

import numpy as np
import pytest
import torch

from dllm_bench.models import load_model
from dllm_bench.tasks.sudoku_puzzles import CELLS, completions, parse_puzzle, puzzle_stream
from dllm_bench.tiny.encoding import cell_digits, encode_batch, posterior_answer_targets
from dllm_bench.tiny.model_setup import BLOCK_FORMATS, build_tiny_model, build_tiny_tokenizer
from dllm_bench.tiny.objective import block_diffusion_batch, block_noise
from dllm_bench.tiny.train import TrainConfig, train


def _batch(flavour: str, n: int, block_size: int, seed: int = 0):
    torch.manual_seed(seed)
    tokenizer = build_tiny_tokenizer(flavour)
    model = build_tiny_model(flavour, tokenizer, d_model=32, n_layers=2, n_heads=4, mlp_hidden_size=64,
                             num_experts=4, num_experts_per_tok=2, block_size=block_size).eval()
    for p in model.parameters():  # larger than the init so that every attended key moves the logits
        torch.nn.init.normal_(p, std=0.3)
    rows = [next(s) for s in [puzzle_stream(seed, "train")] for _ in range(n)]
    prompts, answers = encode_batch(tokenizer, model.config, [r[0] for r in rows], [r[1] for r in rows], 24)
    return model, tokenizer, rows, prompts, answers


@pytest.mark.parametrize("flavour", BLOCK_FORMATS)
@pytest.mark.parametrize("block_size", [4, 8])
def test_each_block_gets_the_logits_of_a_sequence_with_clean_earlier_blocks(flavour, block_size):
    model, _, _, prompts, answers = _batch(flavour, 3, block_size)
    bd = block_diffusion_batch(prompts, answers, model.config.mask_token_id, block_size, 1e-3,
                               torch.Generator().manual_seed(1))
    with torch.no_grad():
        raw = model(bd.input_ids, position_ids=bd.position_ids, raw_logits=True,
                    query_key_mask=bd.pair_mask.expand(len(prompts), -1, -1))
        got = raw[:, bd.logit_sources(model.config.shift_logits)]  # [B, G, V]
        p_len = prompts.shape[1]
        noisy = torch.where(bd.masked, torch.full_like(answers, model.config.mask_token_id), answers)
        for block in bd.answer_blocks.unique():
            # reference: one sequence, clean answer before the block, its noised tokens in it, masks after it
            seq = torch.where(bd.answer_blocks < block, answers, noisy)
            seq = torch.where(bd.answer_blocks > block, torch.full_like(seq, model.config.mask_token_id), seq)
            want = model(torch.cat([prompts, seq], dim=1))[:, p_len:]  # logits at i predict token i
            mine = bd.answer_blocks == block
            torch.testing.assert_close(got[:, mine], want[:, mine], rtol=1e-4, atol=1e-4)


def test_block_noise_draws_one_rate_per_block():
    masked, p = block_noise(2000, 75, 24, 8, 1e-3, torch.Generator().manual_seed(0))
    blocks = torch.arange(75, 99) // 8
    for b in blocks.unique():
        cols = p[:, blocks == b]
        assert bool((cols == cols[:, :1]).all())
        assert abs(masked[:, blocks == b].float().mean().item() - cols.mean().item()) < 0.02
    assert not bool((p[:, blocks == blocks[0]][:, 0] == p[:, blocks == blocks[-1]][:, 0]).all())


def test_posterior_targets_of_a_block_ignore_later_blocks():
    tokenizer = build_tiny_tokenizer("sdar")
    model = build_tiny_model("sdar", tokenizer, d_model=16, n_layers=1, n_heads=2, mlp_hidden_size=32, block_size=4)
    rows = [next(s) for s in [puzzle_stream(3, "train")] for _ in range(16)]
    prompts, answers = encode_batch(tokenizer, model.config, [r[0] for r in rows], [r[1] for r in rows], 24)
    blocks = torch.arange(prompts.shape[1], prompts.shape[1] + 24) // 4
    masked, _ = block_noise(16, prompts.shape[1], 24, 4, 1e-3, torch.Generator().manual_seed(2))
    targets = posterior_answer_targets(tokenizer, [r[0] for r in rows], answers, masked, model.config.vocab_size,
                                       blocks)
    digits = cell_digits(tokenizer, answers[:, :CELLS])
    digit_ids = tokenizer.convert_tokens_to_ids(list("1234"))
    for r, (puzzle, _) in enumerate(rows):
        for cell in range(CELLS):
            b = blocks[cell]
            known = parse_puzzle(puzzle).astype(np.int64)
            for other in range(CELLS):  # brute force: the completions agreeing with what block b sees
                if blocks[other] < b or (blocks[other] == b and not masked[r, other]):
                    known[other] = digits[r, other]
            valid = completions(known)
            want = np.bincount(valid[:, cell] - 1, minlength=4) / len(valid)
            np.testing.assert_allclose(targets[r, cell, digit_ids].numpy(), want, atol=1e-6)


@pytest.mark.parametrize("flavour", BLOCK_FORMATS)
def test_train_writes_a_loadable_block_checkpoint(tmp_path, flavour):
    cfg = TrainConfig(flavour=flavour, steps=2, stage1_steps=0, batch_size=4, d_model=16, n_layers=2, n_heads=2,
                      mlp_hidden_size=32, num_experts=4, threads=1, log_every=1, save_every=2, monitor_every=0,
                      warmup_steps=1, answer_lengths=[20, 24], block_size=4)
    log = train(cfg, tmp_path / flavour, tmp_path / f"{flavour}.pt")
    assert [e["step"] for e in log["curve"]] == [1, 2] and log["monitor"] == []
    model = load_model(tmp_path / flavour, device="cpu")
    assert model.config.attention == "block_causal" and model.config.block_size == 4
    assert type(model).__name__ == type(build_tiny_model(flavour, build_tiny_tokenizer(flavour), d_model=16,
                                                         n_layers=2, n_heads=2, mlp_hidden_size=32,
                                                         num_experts=4, block_size=4)).__name__
    if flavour == "llada2":  # the auxiliary-loss-free balancing moved the expert biases
        assert any(bool(layer.gate.expert_bias.abs().sum() > 0) for layer in model.layers if layer.is_moe)
