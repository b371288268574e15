"""Whether a run's prompts and answer fit the model's positions, judged from config.json and the tokenizer
before any weights are read (a longer canvas decodes positions the model never learned: 0 % at exit 0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dllm_bench.models.loading import load_tokenizer, parse_config
from dllm_bench.models.lora import checkpoint_of
from dllm_bench.runner.errors import ConfigError
from dllm_bench.runner.run_config import RunConfig
from dllm_bench.tasks import Task
from dllm_bench.tasks.chat import render_prompt

# where each checkpoint format keeps its number of positions (LLaDA's OLMo keys, Dream's Qwen2 keys)
POSITION_KEYS = ("max_sequence_length", "max_position_embeddings")


def positions_key(raw: dict[str, Any]) -> str:
    """The config.json key that holds the positions, as named in the message ("4096 assumed" when absent)."""
    found = next((k for k in POSITION_KEYS if k in raw), None)
    return f"{found}={raw[found]}" if found else f"no {' / '.join(POSITION_KEYS)}: the default assumed"


def model_positions(name_or_path: str) -> tuple[int, str] | None:
    """(positions, where they were read) of a local checkpoint's config.json; None for a hub id or a config that
    validation refuses anyway."""
    try:
        path = Path(checkpoint_of(name_or_path)) / "config.json"
        raw = json.loads(path.read_text())
        return parse_config(raw, name_or_path=name_or_path).max_sequence_length, f"config.json {positions_key(raw)}"
    except (OSError, ValueError):
        return None


def check_answer_fits(gen_length: Any, positions: int, where: str) -> None:
    """`gen_length` leaves at least one position for the prompt; `where` names the source of `positions`."""
    if isinstance(gen_length, int) and not isinstance(gen_length, bool) and gen_length >= positions:
        raise ConfigError(f"gen_length={gen_length} is not allowed: the model has {positions} positions ({where}) for "
                          f"the prompt and the answer together; an integer <= {positions - 1} minus the prompt's "
                          "tokens is required")


def prompt_lengths(tokenizer: Any, texts: list[str], chat: bool) -> list[int]:
    """Token counts of rendered prompts as the engine encodes them (chat text already holds its special tokens)."""
    if not texts:
        return []
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=not chat)["input_ids"]]


def check_prompts_fit(run: RunConfig, task: Task, docs: list[dict], selected: list[int]) -> None:
    """The longest selected prompt plus `gen_length` within the model's positions (text prompts of a local
    checkpoint; an image task's prompt grows by the image's tokens inside the model, so only its answer is judged)."""
    directory = Path(str(run.model.name_or_path))
    found = model_positions(str(directory))
    directory = Path(checkpoint_of(directory)) if found is not None else directory  # an adapter's base holds them
    if task.needs_images or found is None:
        return
    positions, where = found
    tokenizer = load_tokenizer(directory)
    if tokenizer is None:
        return  # validation refuses a local checkpoint without its tokenizer
    chat = bool(run.model.chat)
    lengths = prompt_lengths(tokenizer, [render_prompt(task, docs[i], tokenizer, chat) for i in selected], chat)
    if not lengths:
        return
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    gen_length = int(run.gen_length)
    if lengths[longest] + gen_length > positions:
        doc = docs[selected[longest]]
        raise ConfigError(f"gen_length={gen_length} is not allowed: document {doc['sample_id']!r} has a "
                          f"{lengths[longest]}-token prompt and the model {positions} positions ({where}); use "
                          f"gen_length <= {positions - lengths[longest]} (a multiple of block_length), a shorter "
                          "prompt (task.num_fewshot) or offset/limit past that document")
