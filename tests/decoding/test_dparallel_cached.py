"""dParallel's cached LLaDA loops against ours: the same tokens, and the published NFE is ours plus one per block
that its first (full) forward filled.

dParallel's ``generate_with_prefix_cache`` / ``generate_with_dual_cache`` test whether the block is full only after a
cached forward, so a block its full forward fills runs one more cached forward that commits nothing; we end a block
once full (docs/differences.md; no paper cell or preset runs dParallel with a cache). Goldens:
``tests/fixtures/dparallel_cached_published.json`` (how: its ``source``). By default the first puzzles of the
settings that cover each loop and block length (published_goldens.covering_settings), ``-m exhaustive`` every
setting on all 100. Off the recording machine only decodes away from near-ties are compared
(tests/decoding/machine_goldens.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import (
    Accounting,
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    generate,
)
from dllm_bench.decoding.rules import build_rule

from .machine_goldens import NEAR_TIE, decision_margin, same_machine
from .published_goldens import covering_settings, puzzle_prompts, tiny_model

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "dparallel_cached_published.json").read_text())
DEFAULT_PUZZLES = 2  # each decoded alone: the cost is per puzzle
DEFAULT_SETTINGS = covering_settings(GOLDEN["settings"], lambda s: {"loop": s["loop"], "block": s["block_length"]})


def _label(setting: dict) -> str:
    return f"{setting['loop']}-b{setting['block_length']}-thr{setting['threshold']}"


@pytest.mark.threads(GOLDEN["threads"])
@pytest.mark.parametrize(("index", "full"), [
    pytest.param(i, f, id=_label(s) + ("-all" if f else ""), marks=[pytest.mark.exhaustive] if f else [])
    for i, s in enumerate(GOLDEN["settings"]) for f in (False, True) if f or i in DEFAULT_SETTINGS])
def test_cached_loops_equal_ours_plus_one_forward_per_block_filled_at_once(index, full):
    setting = GOLDEN["settings"][index]
    block = setting["block_length"]
    spec = DecodeSpec(Decoding(setting["gen_length"], block, build_policy("blocks"),
                               build_rule("entropy_threshold", max_entropy=setting["threshold"]),
                               build_cache(setting["loop"])), Sampling(), accounting=Accounting(trace=True))
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    exact = same_machine("dparallel_cached_published.json")
    compared = 0
    for sample_id, answer, nfe in rows:
        with torch.no_grad():
            out = generate(tiny_model("llada"), torch.tensor([puzzle_prompts("llada")[sample_id]]), None, spec)
        trace = out.records[0].trace
        if not exact and decision_margin(trace, -setting["threshold"]) < NEAR_TIE:
            continue
        # a block's first step is the only one with all of its positions as candidates
        filled_at_once = sum(1 for t in trace if len(t.sorted_confidences) == block and t.n_committed == block)
        compared += 1
        assert (sample_id, out.tokens[0].tolist(), out.records[0].nfe + filled_at_once) == (sample_id, answer, nfe)
    assert compared >= len(rows) // 2
