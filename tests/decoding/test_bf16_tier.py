"""The bf16 path on the CPU (the casts a GPU run makes): the committed tiny checkpoints decode in bfloat16.

- Dream's own loop in bf16 gives the published loop's tokens (tests/fixtures/bf16_dream_decode_published.json,
  recorded from Fast-dLLM's Dream files under each ATen kernel width; how: the file's ``note``); the logits themselves are pinned in
  tests/models/test_published_logits.py.
- Every policy x rule x cache decodes to the end in bf16, and a batch decodes each prompt as it decodes alone:
  the Fast-dLLM / SlowFast / dLLM-Cache matrix in full under ``-m exhaustive``, by default each of its rules once per
  flavour (the caches in turn, so each cache several times) and the fast lane's settings; every other policy, rule and cache option once, in the
  setting the methods accept and on each flavour it runs on (``dllm_bench.runner.combinations.exercises``).
  That holds for rows of equal length (no padding), which is how these prompts batch. A left-padded row is not
  bit-identical: its attention sums over more keys (the padded ones weigh 0), the kernel blocks the sums
  differently, and the logits move by a rounding step (about 1e-5 in float32, 0.125 in bf16), which in bf16
  changes up to 2 of 6 decodes per setting on the tiny checkpoints (3 pads on the left).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import (
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    build_rule,
    generate,
)
from dllm_bench.models import load_model
from dllm_bench.runner.combinations import exercises
from dllm_bench.tasks.sudoku import SudokuTask
from dllm_bench.tiny.encoding import DEFAULT_GEN_LENGTH, encode_batch

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "dllm_bench" / "tiny" / "checkpoints"
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "bf16_dream_decode_published.json").read_text())
G, BLOCK = DEFAULT_GEN_LENGTH, 8
# the paper cells' confidence precision (conf/experiment/): float64 in the LLaDA loops, the logits' dtype in Dream's
PRECISION = {"llada": "float64", "dream": "model"}

RULES = {  # name -> (policy, its parameters, rule, its parameters)
    "topk": ("blocks", {"steps": G}, "topk", {}),
    "threshold": ("blocks", {}, "threshold", {"threshold": 0.9}),
    "factor": ("blocks", {}, "factor", {"f": 1.0}),
    "factor_compat": ("blocks", {}, "factor", {"f": 1.0, "compat": True}),
    "frechet": ("blocks", {}, "frechet", {"delta": 0.25}),
    "slowfast_code": ("slowfast", {"preset": "code"}, None, {}),
    "slowfast_paper": ("slowfast", {"preset": "paper"}, None, {}),
}
DREAM_RULES = {
    **{f"dream_{alg}": ("dream", {"steps": G, "alg": alg}, None, {}) for alg in ("maskgit_plus", "topk_margin", "entropy")},
    "dream_threshold": ("dream_threshold", {"steps": 3, "threshold": 0.9}, None, {}),
    "slowfast_dream": ("slowfast", {"preset": "dream"}, None, {}),
}
CACHES = {"none": {}, "prefix": {}, "dual": {}, "dllm": {"prompt_interval": 4, "response_interval": 2, "verify_ratio": 0.25}}
# every method once (runner.combinations.exercises: each policy, rule and cache option in a setting the methods
# accept, on each flavour it runs on), beside the paper matrix above
EXERCISES = {e.label: e for e in exercises(gen_length=G, block_length=BLOCK)}
# whole-answer policies decode with one block
WHOLE = ("dream", "dream_threshold")
# the fast lane: one setting per cache and per policy family; the rest of the matrix is marked slow
FAST = {("llada", "threshold", "none"), ("llada", "frechet", "dual"), ("llada", "slowfast_code", "dllm"), ("dream", "dream_entropy", "none"), ("dream", "threshold", "prefix"),
        ("dream", "dream_threshold", "none"), ("dream", "slowfast_dream", "none")}


@cache
def _model(flavour: str, switches: tuple[tuple[str, str], ...] = ()):
    return load_model(CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype=torch.bfloat16, **dict(switches))


@cache
def _encoded(flavour: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    model, rows = _model(flavour), SudokuTask(limit=n).docs()
    return encode_batch(model.tokenizer, model.config, [r["puzzle"] for r in rows], [r["solution"] for r in rows], G)


def _prompts(flavour: str, n: int) -> torch.Tensor:
    return _encoded(flavour, n)[0]


def _answers(flavour: str) -> torch.Tensor:
    """The first two puzzles' solutions [2, G]: the oracle rule's reference (other rules ignore it)."""
    return _encoded(flavour, 2)[1]


def _decode(flavour: str, setting: tuple, cache_name: str, ids: torch.Tensor):
    policy, params, rule, sparams = setting
    block = G if policy in WHOLE or params.get("preset") == "dream" else BLOCK
    decoding = Decoding(G, block, build_policy(policy, **params), build_rule(rule, **sparams) if rule else None,
                        build_cache(cache_name, **CACHES[cache_name]))
    spec = DecodeSpec(decoding, Sampling(confidence_precision=PRECISION[flavour]))
    with torch.no_grad():
        return generate(_model(flavour), ids, torch.ones_like(ids), spec)


def _cases():
    for flavour, rules in (("llada", RULES), ("dream", {**RULES, **DREAM_RULES})):
        for i, name in enumerate(rules):
            for cache_name in CACHES if name != "dream_threshold" else ("none",):  # that policy refuses a cache
                in_turn = cache_name == (list(CACHES)[i % len(CACHES)] if name != "dream_threshold" else "none")
                marks = ([] if (flavour, name, cache_name) in FAST else [pytest.mark.slow] if in_turn
                         else [pytest.mark.exhaustive])
                yield pytest.param(flavour, name, cache_name, marks=marks, id=f"{flavour}-{name}-{cache_name}")


def _in_paper_matrix(exercise) -> bool:
    s = exercise.setting
    if s.cache not in CACHES:
        return False
    return (s.policy == "blocks" and s.rule in RULES) or s.policy in RULES or (
        exercise.flavour == "dream" and s.policy in DREAM_RULES)


def _check_batched_equals_alone(flavour: str, decode) -> None:
    """``decode(rows)`` decodes the prompts of the first two puzzles at ``rows`` (a slice)."""
    batched = decode(slice(0, 2))
    assert _model(flavour).dtype == torch.bfloat16
    assert not (batched.tokens == _model(flavour).config.mask_token_id).any(), "masks left in the answer"
    for i in range(2):
        alone = decode(slice(i, i + 1))
        assert batched.tokens[i].tolist() == alone.tokens[0].tolist(), f"row {i}"
        assert batched.records[i].nfe == alone.records[0].nfe, f"row {i}"


@pytest.mark.parametrize("flavour,name,cache_name", list(_cases()))
def test_bf16_decode_batched_equals_alone(flavour: str, name: str, cache_name: str) -> None:
    setting = {**RULES, **DREAM_RULES}[name]
    _check_batched_equals_alone(flavour, lambda rows: _decode(flavour, setting, cache_name, _prompts(flavour, 2)[rows]))


@pytest.mark.slow
@pytest.mark.parametrize("label", [label for label, e in EXERCISES.items() if not _in_paper_matrix(e)])
def test_bf16_each_method_decodes_batched_as_alone(label: str) -> None:
    exercise = EXERCISES[label]
    spec = DecodeSpec(exercise.setting.decoding(), Sampling(confidence_precision=PRECISION[exercise.flavour]))
    model = _model(exercise.flavour, exercise.model_switches)

    def decode(rows: slice):
        ids = _prompts(exercise.flavour, 2)[rows]
        with torch.no_grad():
            return generate(model, ids, torch.ones_like(ids), spec, reference=_answers(exercise.flavour)[rows])

    _check_batched_equals_alone(exercise.flavour, decode)


@pytest.mark.parametrize("alg", [pytest.param(a, marks=[] if a == "entropy" else [pytest.mark.slow])
                                 for a in sorted(GOLDEN["answers_by_capability"]["AVX512"])])
def test_dream_bf16_decode_equals_the_published_loop(alg: str) -> None:
    here = torch.backends.cpu.get_cpu_capability()
    if here not in GOLDEN["answers_by_capability"]:  # bf16 products round differently per kernel width
        pytest.skip(f"recorded under {sorted(GOLDEN['answers_by_capability'])} kernels, this CPU runs {here}")
    ids = _prompts("dream", GOLDEN["puzzles"])
    out = _decode("dream", DREAM_RULES[f"dream_{alg}"], "none", ids)
    want = GOLDEN["answers_by_capability"][here][alg]
    assert [row.tolist() for row in out.tokens] == want
