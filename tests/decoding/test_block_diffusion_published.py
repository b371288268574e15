"""Fast-dLLM v2 and SDAR decode as their published code does on the trained tiny checkpoints (tokens and NFE).

Goldens (how: each fixture's ``source``): Fast-dLLM v2's HF ``generate`` (modeling.py) on ``tiny_fast_dllm_v2``
(``tests/fixtures/fast_dllm_v2_trained_published.json``) and SDAR's ``block_diffusion_generate``
(``low_confidence_dynamic``, generate.py) on ``tiny_sdar`` (``tests/fixtures/sdar_published.json``), 100 held-out
Sudoku puzzles per setting: per puzzle the answer ids the published loop returns and its forward calls. Block sizes
8 on these block-4 checkpoints run the attention on the decoder's blocks, as both published loops build their masks.

NFE as each loop counts its forwards: Fast-dLLM v2's ends at the stop token without storing that block (ours the
same: equal counts), or stores the last block for a token past the answer (ours does not run it); SDAR's stores
every block it decodes, the last one too (ours: one fewer). Two puzzles of two settings per method (a block of 4
and one of 8) run by default, every recorded one of every setting under ``-m exhaustive``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import Accounting, DecodeSpec, Decoding, build_policy, generate
from dllm_bench.decoding.spec import TokenIds
from dllm_bench.models import load_model
from dllm_bench.models.file_digest import file_sha256
from dllm_bench.tiny.encoding import prompt_ids

from .machine_goldens import NEAR_TIE, decision_margin, same_machine

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = {"fast_dllm_v2": "fast_dllm_v2_trained_published.json", "sdar": "sdar_published.json"}
CHECKPOINTS = ROOT / "dllm_bench" / "tiny" / "checkpoints"
PUZZLES = ROOT / "dllm_bench" / "tasks" / "sudoku_data" / "sudoku_test.jsonl"
DEFAULT_PUZZLES = 2
DEFAULT_SETTINGS = {"fast_dllm_v2": (0, 2), "sdar": (1, 2)}  # make test: a block of 4 and one of 8 (the rest: -m exhaustive)
STOP = 102


@cache
def _golden(method: str) -> dict:
    return json.loads((ROOT / "tests" / "fixtures" / FIXTURES[method]).read_text())


@cache
def _model(method: str):
    golden = _golden(method)
    path = CHECKPOINTS / golden["checkpoint"]["name"]
    assert file_sha256(path / "model.safetensors") == golden["checkpoint"]["weights_sha256"], \
        f"{path.name}'s weights changed since the golden was recorded: re-record it"
    return load_model(path, device="cpu", dtype=torch.float32)


@cache
def _puzzles() -> dict[str, str]:
    return {r["sample_id"]: r["puzzle"] for r in map(json.loads, PUZZLES.read_text().splitlines())}


@cache
def _prompt(method: str, sample_id: str) -> list[int]:
    return prompt_ids(_model(method).tokenizer, _puzzles()[sample_id])


def _answer_length(method: str, setting: dict, prompt_length: int) -> int:
    """The answer each published loop decodes: to the end of its last block on the grid."""
    bs = setting["block_length"]
    if method == "fast_dllm_v2":  # max_new_tokens // block_size blocks after the prompt's full ones
        return (prompt_length // bs + setting["max_new_tokens"] // bs) * bs - prompt_length
    return -(-(prompt_length + setting["gen_length"]) // bs) * bs - prompt_length  # the block holding prompt + gen


def _spec(method: str, setting: dict, G: int, trace: bool = False) -> DecodeSpec:
    if method == "fast_dllm_v2":
        policy = build_policy("block_diffusion", sub_block=setting["sub_block"], threshold=setting["tau"])
    else:
        policy = build_policy("block_diffusion", steps=setting["steps"], threshold=setting["tau"], sdar_topk=True)
    return DecodeSpec(Decoding(G, setting["block_length"], policy, early_stop=True), accounting=Accounting(trace=trace),
                      token_ids=TokenIds(stop=(STOP,)))


def _published_nfe(method: str, calls: int, want: list[int], G: int) -> int:
    """The published forward calls in our count (module docstring)."""
    if method == "fast_dllm_v2":
        return calls - (len(want) > G)  # it stored the last block for a token past the answer
    return calls - 1  # it stored the block holding the stop (or the last one)


def _cases():
    for method in FIXTURES:
        for index, s in enumerate(_golden(method)["settings"]):
            label = "-".join(f"{k}{s[k]}" for k in s if k != "puzzles")
            default = index in DEFAULT_SETTINGS[method]
            yield pytest.param(method, index, False, id=f"{method}-{label}", marks=[] if default else [pytest.mark.exhaustive])
            yield pytest.param(method, index, True, id=f"{method}-{label}-all", marks=[pytest.mark.exhaustive])


@pytest.mark.parametrize(("method", "index", "full"), list(_cases()))
def test_decodes_as_the_published_loop_on_the_trained_checkpoint(method, index, full):
    setting = _golden(method)["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][index * DEFAULT_PUZZLES:][:DEFAULT_PUZZLES]
    here = same_machine(FIXTURES[method])
    model, compared = _model(method), 0
    for sample_id, want, calls in rows:
        prompt = _prompt(method, sample_id)
        G = _answer_length(method, setting, len(prompt))
        with torch.no_grad():
            out = generate(model, torch.tensor([prompt]), None, _spec(method, setting, G, trace=not here))
        if not here and decision_margin(out.records[0].trace, setting["tau"], probabilities=True) < NEAR_TIE:
            continue  # a near-tie another machine may round the other way
        compared += 1
        got = out.tokens[0].tolist()
        assert got[: len(want[:G])] == want[:G], sample_id
        assert STOP in want[:G] or len(want[:G]) == G, sample_id  # the published answer ends at a stop or the last block
        assert out.records[0].nfe == _published_nfe(method, calls, want, G), sample_id
    assert compared or not here


def test_sdar_topk_is_the_published_rule_where_fewer_masks_than_k_are_left():
    """Blocks of 4 in 2 steps (k = 2): a step that finds one mask left also rewrites a committed token in SDAR's
    loop (here its stop token, which ends the decode); without ``sdar_topk`` ours commits the mask alone."""
    setting = _golden("sdar")["settings"][1]
    assert (setting["block_length"], setting["steps"]) == (4, 2)
    sample_id, want, _ = setting["puzzles"][0]
    prompt = _prompt("sdar", sample_id)
    G = _answer_length("sdar", setting, len(prompt))
    spec = _spec("sdar", setting, G)
    plain = DecodeSpec(Decoding(G, 4, build_policy("block_diffusion", steps=2, threshold=setting["tau"]),
                                early_stop=True), token_ids=TokenIds(stop=(STOP,)))
    with torch.no_grad():
        published = generate(_model("sdar"), torch.tensor([prompt]), None, spec)
        ours = generate(_model("sdar"), torch.tensor([prompt]), None, plain)
    assert published.tokens[0, : len(want)].tolist() == want and published.records[0].edits >= 1
    assert ours.tokens[0, : len(want)].tolist() != want and ours.records[0].edits == 0


def test_sdar_topk_decodes_a_batch_row_as_alone():
    """Rows of a batch pick their rewritten positions with their own k, as the published per-row top-k."""
    setting = _golden("sdar")["settings"][2]
    ids = [row[0] for row in setting["puzzles"][:2]]
    prompts = torch.tensor([_prompt("sdar", s) for s in ids])
    spec = _spec("sdar", setting, _answer_length("sdar", setting, prompts.shape[1]))
    with torch.no_grad():
        together = generate(_model("sdar"), prompts, None, spec)
        alone = [generate(_model("sdar"), prompts[i : i + 1], None, spec) for i in range(len(ids))]
    for i, out in enumerate(alone):
        assert together.tokens[i].tolist() == out.tokens[0].tolist()
        assert (together.records[i].nfe, together.records[i].edits) == (out.records[0].nfe, out.records[0].edits)


def _batch_cases():
    for index, s in enumerate(_golden("fast_dllm_v2")["batch_sample"]["settings"]):
        label = f"b{s['block_length']}-sub{s['sub_block']}-tau{s['tau']}-batch{s['batch']}"
        yield pytest.param(index, False, id=label, marks=[] if index == 1 else [pytest.mark.exhaustive])
        yield pytest.param(index, True, id=f"{label}-all", marks=[pytest.mark.exhaustive])


@pytest.mark.parametrize(("index", "full"), list(_batch_cases()))
def test_fast_dllm_v2_batches_decode_as_its_batch_sample(index, full):
    """Fast-dLLM v2's ``batch_sample`` at batch 4: each row's answer as published. Its rows move through every
    sub-block together, so a row takes part in as many forwards as the slowest row still in the batch; ours moves
    each row on its own (docs/differences.md): a row's NFE is at most the published forwards it took part in."""
    setting = _golden("fast_dllm_v2")["batch_sample"]["settings"][index]
    rows, batch = setting["puzzles"], setting["batch"]
    groups = [rows[i : i + batch] for i in range(0, len(rows) if full else batch, batch)]
    here = same_machine(FIXTURES["fast_dllm_v2"])
    model, compared = _model("fast_dllm_v2"), 0
    for group in groups:
        prompts = torch.tensor([_prompt("fast_dllm_v2", sample_id) for sample_id, _, _ in group])
        G = _answer_length("fast_dllm_v2", setting, prompts.shape[1])
        with torch.no_grad():
            out = generate(model, prompts, None, _spec("fast_dllm_v2", setting, G, trace=not here))
        for i, (sample_id, want, calls) in enumerate(group):
            if not here and decision_margin(out.records[i].trace, setting["tau"], probabilities=True) < NEAR_TIE:
                continue
            compared += 1
            got = out.tokens[i].tolist()
            assert got[: len(want)] == want and STOP in want, sample_id
            assert out.records[i].nfe <= calls, sample_id
    assert compared or not here
