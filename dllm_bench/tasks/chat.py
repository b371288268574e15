"""Turning a task prompt into model input text: plain, or one user turn of the tokenizer's chat template."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def chat_wrap(text: str, tokenizer: Any) -> str:
    """`text` as the single user message of the tokenizer's chat template, ready for the assistant turn.

    This is what the LLaDA/Fast-dLLM evaluation did for Instruct models: the whole few-shot prompt is
    one user turn.
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no chat_template; use chat=False for this model")
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )


def render_prompt(task: Any, doc: dict, tokenizer: Any, chat: bool) -> str:
    """The exact text to tokenize for `doc`: the task prompt, chat-templated when `chat` is true."""
    text = task.prompt(doc, chat=chat)
    return chat_wrap(text, tokenizer) if chat else text


def encode_left_padded(tokenizer: Any, texts: Sequence[str], chat: bool, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and attention mask [B, P] (CPU) of model input texts; chat-templated text already holds its
    special tokens, so only plain text gets the tokenizer's own."""
    rows = [tokenizer.encode(t, add_special_tokens=not chat) for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids, mask
