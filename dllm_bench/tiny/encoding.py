"""Token layout of the tiny models' examples: chat-templated puzzle, then the 16 digits and end tokens."""

from __future__ import annotations

import numpy as np
import torch

from dllm_bench.tasks.sudoku_puzzles import (
    BLANK,
    CELLS,
    DIGITS,
    ROW_SEPARATOR,
    completion_marginals,
    parse_puzzle,
)

# every character that appears in a prompt or an answer (the chat template's own text is added by the builder)
TASK_CHARS = DIGITS + BLANK + ROW_SEPARATOR
DEFAULT_GEN_LENGTH = 24  # 16 digits, one end-of-turn, 7 EOS pads


def prompt_ids(tokenizer, puzzle: str) -> list[int]:
    """The puzzle inside the tokenizer's chat template, with the assistant header (generation prompt)."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": puzzle}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer.encode(text, add_special_tokens=False)


def answer_ids(tokenizer, solution: str, gen_length: int, eos_token_id: int, eot_token_id: int | None) -> list[int]:
    """The 16 digit ids, then end-of-turn (when the flavour has one), then EOS up to `gen_length`."""
    ids = tokenizer.encode(solution, add_special_tokens=False)
    if len(ids) != CELLS:
        raise ValueError(f"solution {solution!r} encodes to {len(ids)} tokens; a char tokenizer gives {CELLS}")
    ids = ids + ([eot_token_id] if eot_token_id is not None else [])
    if len(ids) > gen_length:
        raise ValueError(f"gen_length={gen_length} is shorter than the answer ({len(ids)} tokens)")
    return ids + [eos_token_id] * (gen_length - len(ids))


def encode_batch(tokenizer, config, puzzles: list[str], solutions: list[str], gen_length: int):
    """(prompt ids [B, P], answer ids [B, G]) long tensors; all puzzles have the same length, so no padding."""
    prompts = [prompt_ids(tokenizer, p) for p in puzzles]
    if len({len(p) for p in prompts}) != 1:
        raise ValueError("puzzle prompts differ in length; expected the fixed 4x4 text format")
    answers = [answer_ids(tokenizer, s, gen_length, config.eos_token_id, config.eot_token_id) for s in solutions]
    return torch.tensor(prompts, dtype=torch.long), torch.tensor(answers, dtype=torch.long)


def cell_digits(tokenizer, cell_ids: torch.Tensor) -> np.ndarray:
    """Digit values [B, 16] (1..4; 0 for any token that is not a digit) of answer-cell token ids [B, 16]."""
    digit_ids = torch.tensor(tokenizer.convert_tokens_to_ids(list(DIGITS)))
    is_digit = cell_ids[..., None] == digit_ids  # [B, 16, 4]
    return (is_digit.long() * torch.arange(1, len(DIGITS) + 1)).sum(-1).numpy()


def posterior_answer_targets(tokenizer, puzzles: list[str], answers: torch.Tensor, masked: torch.Tensor,
                             vocab_size: int, answer_blocks: torch.Tensor | None = None) -> torch.Tensor:
    """Soft targets [B, G, V]: for the 16 cells, the exact posterior digit marginals given the clues and the
    answer cells left unmasked (all valid completions equally likely, as in the training data); for the end
    tokens, the answer token itself.

    Cross-entropy against these equals the expected cross-entropy against the sampled completion given the
    noisy input (the answer is a uniformly random valid completion), so the objective is LLaDA's in
    expectation with the sampling noise of the completion removed (a Rao-Blackwellised estimator).
    ``answer_blocks`` [G] (block diffusion): a cell of block b sees the unmasked cells of its block and every cell
    of the blocks before it, none after; its posterior is taken given those.
    """
    targets = torch.nn.functional.one_hot(answers, vocab_size).to(torch.float32)
    digit_ids = torch.tensor(tokenizer.convert_tokens_to_ids(list(DIGITS)))
    clues = np.stack([parse_puzzle(p) for p in puzzles]).astype(np.int64)
    digits = cell_digits(tokenizer, answers[:, :CELLS])
    unmasked = ~masked[:, :CELLS]
    cell_targets = torch.zeros(len(puzzles), CELLS, vocab_size)
    cell_blocks = torch.zeros(CELLS, dtype=torch.long) if answer_blocks is None else answer_blocks[:CELLS]
    for block in cell_blocks.unique():
        seen = (cell_blocks < block) | (unmasked & (cell_blocks == block))  # [B, 16]
        known = np.where(clues > 0, clues, np.where(seen.numpy(), digits, 0))
        marginals = torch.from_numpy(completion_marginals(known)).to(torch.float32)  # [B, 16, 4]
        mine = cell_blocks == block
        cell_targets[:, mine.nonzero()[:, 0][:, None], digit_ids] = marginals[:, mine]
    targets[:, :CELLS] = cell_targets
    return targets
