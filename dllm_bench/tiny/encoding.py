"""Token layout of the tiny models' examples: chat-templated puzzle, then the 16 digits and end tokens."""

from __future__ import annotations

import torch

from dllm_bench.tiny.sudoku_puzzles import BLANK, CELLS, DIGITS, ROW_SEPARATOR

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
