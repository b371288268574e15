"""Shared by the published-code golden replays: the tiny checkpoint, the held-out puzzles' prompts, answer hashes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import torch
from safetensors.torch import load_file

from dllm_bench.models import load_model
from dllm_bench.tiny.encoding import prompt_ids

ROOT = Path(__file__).resolve().parents[2]
PUZZLES = ROOT / "dllm_bench" / "tasks" / "sudoku_data" / "sudoku_test.jsonl"


def weights_sha256(directory: Path) -> str:
    """The digest of a checkpoint's tensors (names and raw bytes, sorted by name) that a golden records: the
    weights it was recorded on."""
    sd = load_file(str(Path(directory) / "model.safetensors"))
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(sd[k].contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


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


def covering_settings(settings: list[dict], paths: Callable[[dict], dict]) -> frozenset[int]:
    """The replays' default subset of a golden's settings: a few in which every code-path value ``paths`` names
    (a rule, a loop, a cache or none, one block or several, ...) occurs at least once, chosen greedily (the setting
    adding the most values not yet covered, ties by index); ``-m exhaustive`` replays every setting."""
    values = [{(k, json.dumps(v, sort_keys=True)) for k, v in paths(s).items()} for s in settings]
    covered: set = set()
    chosen: set[int] = set()
    while True:
        gain, best = max((len(v - covered), -i) for i, v in enumerate(values))
        if gain == 0:
            return frozenset(chosen)
        chosen.add(-best)
        covered |= values[-best]
