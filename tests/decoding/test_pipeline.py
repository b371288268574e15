"""Multi-block pipelines (policy pipeline: D2F, d3LLM): goldens recorded by running the published loops beside ours on
the tiny checkpoints (``tests/fixtures/pipeline_published.json``; how: each method's ``source``), the committed-block
cache against recomputing the canvas, batches against single rows, bf16, and the refusals."""

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
from dllm_bench.decoding.config import build_rule
from dllm_bench.models import load_model

from .machine_goldens import NEAR_TIE, decision_margin, same_machine
from .published_goldens import answer_hash, covering_settings, puzzle_prompts

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = "pipeline_published.json"
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / FIXTURE).read_text())
CHECKPOINTS = ROOT / "dllm_bench" / "tiny" / "checkpoints"
DEFAULT_PUZZLES = 3
BATCH = 25
# the caches each method's goldens are replayed with: D2F's is its committed-block cache, recomputing is exact too
CACHES = {"d2f_llada": ("committed_blocks", "none"), "d2f_dream": ("committed_blocks", "none"), "d3llm_llada": ("none",)}


def _model(method: str, dtype: torch.dtype = torch.float32):
    flavour = GOLDEN["methods"][method]["flavour"]
    if method.startswith("d2f"):  # the LoRA on the base, block-causal on the anchored grid
        return _load(f"tiny_{flavour}_d2f", dtype, "block_causal", "anchored")
    return _load(f"tiny_{flavour}", dtype, None, None)


_LOADED: dict = {}


def _load(name: str, dtype: torch.dtype, attention: str | None, grid: str | None):
    key = (name, dtype, attention, grid)
    if key not in _LOADED:
        _LOADED[key] = load_model(CHECKPOINTS / name, device="cpu", dtype=dtype, attention=attention, block_grid=grid)
    return _LOADED[key]


def _spec(method: str, setting: dict, cache: str, trace: bool = False) -> DecodeSpec:
    variant = GOLDEN["methods"][method]["variant"]  # the fixture's recorded names: its threshold is d3LLM's entropy
    commit = {"threshold": setting["threshold"]} if variant == "d2f" else {"max_entropy": setting["threshold"]}
    policy = build_policy("pipeline", method=variant, block_add_threshold=setting["block_add_threshold"],
                          decoded_token_threshold=setting["decoded_token_threshold"], **commit)
    return DecodeSpec(Decoding(GOLDEN["gen_length"], setting["block_length"], policy, None, build_cache(cache),
                               early_stop=False),
                      Sampling(confidence_precision=GOLDEN["methods"][method]["precision"]), Accounting(trace=trace))


def _cases():
    """make test: the first puzzles of the settings covering each method's caches and block lengths
    (published_goldens.covering_settings; the thresholds are numbers in the same code); -m exhaustive every setting
    with each cache on all puzzles."""
    for method, entry in GOLDEN["methods"].items():
        pairs = [(i, cache) for i in range(len(entry["settings"])) for cache in CACHES[method]]
        default = covering_settings([{"cache": c, "block": entry["settings"][i]["block_length"]} for i, c in pairs],
                                    lambda case: case)
        for n, (i, cache) in enumerate(pairs):
            s = entry["settings"][i]
            for full in (False, True):
                label = f"{method}-b{s['block_length']}-add{s['block_add_threshold']}-t{s['threshold']}-{cache}"
                yield pytest.param(method, i, cache, full, id=label + ("-all" if full else ""),
                                   marks=[pytest.mark.exhaustive] if full or n not in default else [])


@pytest.mark.parametrize(("method", "index", "cache", "full"), list(_cases()))
def test_pipeline_decodes_as_its_published_code(method, index, cache, full):
    """Each recorded puzzle's answer and NFE; decoded BATCH puzzles at a time (one prompt length; a batch decodes
    each row as alone: test_a_batch_decodes_each_row_as_alone)."""
    entry = GOLDEN["methods"][method]
    setting = entry["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    prompts = puzzle_prompts(entry["flavour"])
    exact = same_machine(FIXTURE)
    spec = _spec(method, setting, cache, trace=not exact)
    compared = 0
    for lo in range(0, len(rows), BATCH):
        chunk = rows[lo: lo + BATCH]
        out = generate(_model(method), torch.tensor([prompts[sid] for sid, _, _ in chunk]), None, spec)
        for b, (sample_id, digest, nfe) in enumerate(chunk):
            if not exact and decision_margin(out.records[b].trace, None) < NEAR_TIE:
                continue
            compared += 1
            assert (sample_id, answer_hash(out.tokens[b].tolist()), out.records[b].nfe) == (sample_id, digest, nfe)
    assert compared >= len(rows) // 2


@pytest.mark.parametrize("method", list(GOLDEN["methods"]))
def test_a_batch_decodes_each_row_as_alone(method):
    """Rows of a batch (one prompt length) progress block by block on their own, under one storage."""
    entry = GOLDEN["methods"][method]
    setting = entry["settings"][0]
    rows = setting["puzzles"][:4]
    prompts = puzzle_prompts(entry["flavour"])
    batch = torch.tensor([prompts[sid] for sid, _, _ in rows])
    for cache in CACHES[method]:
        out = generate(_model(method), batch, None, _spec(method, setting, cache))
        got = [(answer_hash(out.tokens[b].tolist()), out.records[b].nfe) for b in range(len(rows))]
        alone = []
        for sid, _, _ in rows:
            single = generate(_model(method), torch.tensor([prompts[sid]]), None, _spec(method, setting, cache))
            alone.append((answer_hash(single.tokens[0].tolist()), single.records[0].nfe))
        assert got == alone
    assert len({nfe for _, nfe in alone}) > 1 or len({d for d, _ in alone}) > 1  # rows that differ


def test_left_padded_rows_decode_as_alone_with_the_committed_cache():
    """Prompts of different lengths (left padding): each row's blocks start at its own prompt's end."""
    method = "d2f_llada"
    setting = GOLDEN["methods"][method]["settings"][0]
    prompts = puzzle_prompts("llada")
    short = prompts[setting["puzzles"][0][0]][3:]  # a shorter prompt
    long = prompts[setting["puzzles"][1][0]]
    P = max(len(short), len(long))
    pad = _model(method).config.pad_token_id
    ids = torch.tensor([[pad] * (P - len(short)) + short, long])
    mask = torch.tensor([[0] * (P - len(short)) + [1] * len(short), [1] * len(long)])
    for cache in CACHES[method]:
        out = generate(_model(method), ids, mask, _spec(method, setting, cache))
        for b, prompt in enumerate((short, long)):
            alone = generate(_model(method), torch.tensor([prompt]), None, _spec(method, setting, cache))
            assert out.tokens[b].tolist() == alone.tokens[0].tolist() and out.records[b].nfe == alone.records[0].nfe


def test_the_committed_cache_computes_fewer_positions_than_recomputing():
    method = "d2f_llada"
    setting = GOLDEN["methods"][method]["settings"][0]
    prompt = torch.tensor([puzzle_prompts("llada")[setting["puzzles"][0][0]]])
    cached = generate(_model(method), prompt, None, _spec(method, setting, "committed_blocks")).records[0]
    plain = generate(_model(method), prompt, None, _spec(method, setting, "none")).records[0]
    assert cached.nfe == plain.nfe and cached.forward_positions < plain.forward_positions


@pytest.mark.parametrize("method", ["d2f_llada", "d2f_dream"])
def test_bf16_decodes_with_and_without_the_cache(method):
    """bf16 (the published dtype): both paths end with every position committed, and they mostly agree (the cached
    and the recomputed K/V round differently in bf16)."""
    entry = GOLDEN["methods"][method]
    setting = entry["settings"][0]
    prompts = puzzle_prompts(entry["flavour"])
    model = _model(method, torch.bfloat16)
    same = 0
    rows = setting["puzzles"][:4]
    for sid, _, _ in rows:
        outs = [generate(model, torch.tensor([prompts[sid]]), None, _spec(method, setting, c)) for c in CACHES[method]]
        assert all((o.tokens != model.config.mask_token_id).all() for o in outs)
        same += outs[0].tokens.tolist() == outs[1].tokens.tolist()
    assert same >= len(rows) // 2


def test_eos_stops_adding_blocks_and_fills_the_rest():
    """D2F: once an EOS is committed no block is added; the positions never added are returned as EOS."""
    method = "d2f_llada"
    model = _model(method)
    eos = model.config.eos_token_id
    prompt = torch.tensor([puzzle_prompts("llada")["sudoku4-0000"]])
    spec = DecodeSpec(Decoding(48, 8, build_policy("pipeline", block_add_threshold=0.1), None, build_cache("none"),
                               early_stop=False), Sampling(confidence_precision="float32"), Accounting())
    out = generate(model, prompt, None, spec)
    tokens = out.tokens[0].tolist()
    first = tokens.index(eos)
    assert first < 40 and all(t == eos for t in tokens[(first // 8 + 2) * 8:])


def test_refusals_name_the_value():
    with pytest.raises(ValueError, match="method 'x'"):
        build_policy("pipeline", method="x")
    with pytest.raises(ValueError, match="block_add_threshold must be in"):
        build_policy("pipeline", block_add_threshold=1.5)
    with pytest.raises(ValueError, match="preset 'nope'"):
        build_policy("pipeline", preset="nope")
    policy = build_policy("pipeline")
    with pytest.raises(ValueError, match="rule 'threshold' has no place"):
        policy.check_combination(build_rule("threshold"), build_cache("none"), gen_length=24, block_length=8)
    with pytest.raises(ValueError, match="policy that grows the canvas"):
        build_cache("committed_blocks").check_combination(policy=build_policy("blocks"), rule=None,
                                                          gen_length=24, block_length=8)
    prompt = torch.tensor([puzzle_prompts("llada")["sudoku4-0000"]])
    spec = DecodeSpec(Decoding(24, 8, policy, None, build_cache("committed_blocks"), early_stop=False), Sampling(),
                      Accounting())
    with pytest.raises(ValueError, match="attends fully"):
        generate(_model("d3llm_llada"), prompt, None, spec)


def test_presets_expand_under_given_values():
    assert build_policy("pipeline", preset="d3llm_llada").method == "d3llm"
    assert build_policy("pipeline", preset="d3llm_llada", max_entropy=0.2).max_entropy == 0.2
    assert build_policy("pipeline", preset="d2f_dream").block_add_threshold == 0.1
