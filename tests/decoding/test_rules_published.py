"""The rules decode as their published code does: goldens recorded by running the published decoder beside ours
on the tiny LLaDA (and, where a setting names it, Dream) checkpoint (``tests/fixtures/rules_published.json``; how:
its ``source`` field), replayed here. A setting's ``steps`` (default none: adaptive) is policy blocks' step count.
LocalLeap has no published code: its settings (``origin`` reference) come from a plain reference of the paper's rule.

Each golden holds, per setting and held-out puzzle, a hash of the published answer ids and its NFE. By default
the first setting of each group (rule x model x origin x fixed steps or not) replays its first puzzles (one
batch per setting); ``-m exhaustive`` replays every setting on all of its puzzles.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, Sampling, build_cache, build_policy, generate
from dllm_bench.decoding.rules import build_rule
from dllm_bench.runner.renames import current_names

from .published_goldens import answer_hash
from .published_goldens import puzzle_prompts as _prompts
from .published_goldens import tiny_model as _model

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "rules_published.json").read_text())
DEFAULT_PUZZLES = 4
DEFAULT_SETTINGS = 1  # per group


def _group(setting: dict) -> tuple:
    return setting["rule"], setting.get("flavour", "llada"), setting.get("origin"), "steps" in setting


def _default_indices() -> set[int]:
    seen: dict[tuple, int] = {}
    chosen = set()
    for i, setting in enumerate(GOLDEN["settings"]):
        key = _group(setting)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= DEFAULT_SETTINGS:
            chosen.add(i)
    return chosen


def _decode(setting: dict, sample_ids: list[int]) -> list[tuple[str, int]]:
    flavour = setting.get("flavour", "llada")
    model, prompts = _model(flavour), _prompts(flavour)
    batch = [prompts[i] for i in sample_ids]
    assert len({len(p) for p in batch}) == 1  # the chat-templated puzzles have one length: no padding
    policy = build_policy("blocks", steps=setting.get("steps"))
    spec = DecodeSpec(Decoding(GOLDEN["gen_length"], setting["block_length"], policy,
                               build_rule(setting["rule"], **current_names("rule", setting["rule"], setting["params"])), build_cache("none")),
                      Sampling(confidence_precision=setting["precision"]))
    with torch.no_grad():
        out = generate(model, torch.tensor(batch), None, spec)
    return [(answer_hash(out.tokens[b].tolist()), out.records[b].nfe) for b in range(len(batch))]


def _case(i: int, setting: dict, full: bool):
    label = f"{setting['rule']}-{'-'.join(f'{k}{v}' for k, v in setting['params'].items())}-b{setting['block_length']}"
    label += f"-s{setting['steps']}" if "steps" in setting else ""
    label += f"-{setting['flavour']}" if "flavour" in setting else ""
    label += f"-{setting['origin']}" if "origin" in setting else ""
    return pytest.param(i, full, id=label + ("-all" if full else ""), marks=[pytest.mark.exhaustive] if full else [])


@pytest.mark.parametrize(("index", "full"), [_case(i, s, f) for i, s in enumerate(GOLDEN["settings"])
                                             for f in (False, True) if f or i in _default_indices()])
def test_rule_decodes_as_its_published_code(index, full):
    setting = GOLDEN["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    got = _decode(setting, [sample_id for sample_id, _, _ in rows])
    want = [(digest, nfe) for _, digest, nfe in rows]
    assert got == want
