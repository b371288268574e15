"""Shared by the published-code golden replays: the tiny checkpoint, the held-out puzzles' prompts, answer hashes."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

import torch

from dllm_bench.models import load_model
from dllm_bench.tiny.encoding import prompt_ids

ROOT = Path(__file__).resolve().parents[2]
PUZZLES = ROOT / "dllm_bench" / "tasks" / "sudoku_data" / "sudoku_test.jsonl"


def answer_hash(tokens: list[int]) -> str:
    """The fixtures' answer digest: sha256 of the int64 answer ids, first 16 hex digits."""
    return hashlib.sha256(torch.tensor(tokens, dtype=torch.int64).numpy().tobytes()).hexdigest()[:16]


@cache
def tiny_model(flavour: str = "llada", dtype: torch.dtype | None = None):
    """The committed tiny checkpoint on the CPU (load_model's dtype unless one is given)."""
    kwargs = {} if dtype is None else {"dtype": dtype}
    return load_model(ROOT / "dllm_bench" / "tiny" / "checkpoints" / f"tiny_{flavour}", device="cpu", **kwargs)


@cache
def puzzle_prompts(flavour: str = "llada") -> dict[str, list[int]]:
    """sample_id -> chat-templated prompt ids of every held-out puzzle."""
    rows = [json.loads(line) for line in PUZZLES.read_text().splitlines()]
    return {r["sample_id"]: prompt_ids(tiny_model(flavour).tokenizer, r["puzzle"]) for r in rows}
