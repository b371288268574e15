"""WINO (revokable decoding with a shadow block): goldens recorded by running the published ``decoding_wino`` beside
ours on the tiny LLaDA checkpoint (``tests/fixtures/wino_published.json``; how: its ``source`` field), the
network's pair-mask path against prefix forwards, a reference step written here, accounting and refusals. By
default the goldens' first puzzles of the settings that cover one block and several (published_goldens.
covering_settings; the thresholds are numbers in the same code), ``-m exhaustive`` every setting on all puzzles.
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
from dllm_bench.decoding.config import build_rule
from dllm_bench.models import load_model

from .conftest import left_pad, prompts_for
from .published_goldens import answer_hash, covering_settings
from .published_goldens import puzzle_prompts as _prompts
from .published_goldens import tiny_model as _model
from .spec_kwargs import spec_generate

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "wino_published.json").read_text())
DEFAULT_PUZZLES = 4
NARROW_OUT_PUZZLES = 12  # the first puzzles whose decodes revoke a token
DEFAULT_SETTINGS = covering_settings(GOLDEN["settings"], lambda s: {"block": s["block_length"]})


def _spec(setting: dict, trace: bool = False) -> DecodeSpec:
    policy = build_policy("wino", threshold=setting["threshold"], threshold_back=setting["threshold_back"])
    return DecodeSpec(Decoding(GOLDEN["gen_length"], setting["block_length"], policy, None, build_cache("none")),
                      Sampling(confidence_precision=setting["precision"]), Accounting(trace=trace))


def _case(i: int, setting: dict, full: bool):
    label = f"t{setting['threshold']}-back{setting['threshold_back']}-b{setting['block_length']}"
    return pytest.param(i, full, id=label + ("-all" if full else ""), marks=[pytest.mark.exhaustive] if full else [])


@pytest.mark.parametrize(("index", "full"), [_case(i, s, f) for i, s in enumerate(GOLDEN["settings"])
                                             for f in (False, True) if f or i in DEFAULT_SETTINGS])
def test_wino_decodes_as_its_published_code(index, full):
    setting = GOLDEN["settings"][index]
    rows = setting["puzzles"] if full else setting["puzzles"][:DEFAULT_PUZZLES]
    prompts = _prompts()
    batch = [prompts[sample_id] for sample_id, _, _ in rows]
    assert len({len(p) for p in batch}) == 1  # one prompt length: no padding
    out = generate(_model(), torch.tensor(batch), None, _spec(setting))
    got = [(answer_hash(out.tokens[b].tolist()), out.records[b].nfe) for b in range(len(batch))]
    assert got == [(digest, nfe) for _, digest, nfe in rows]


def test_the_goldens_exercise_narrow_out():
    """Some golden decodes revoke tokens (more commits than answer positions), so the re-masking path is checked."""
    setting = GOLDEN["settings"][0]
    prompts = _prompts()
    batch = [prompts[sample_id] for sample_id, _, _ in setting["puzzles"][:NARROW_OUT_PUZZLES]]
    out = generate(_model(), torch.tensor(batch), None, _spec(setting, trace=True))
    commits = [sum(step.n_committed for step in rec.trace) for rec in out.records]
    assert max(commits) > GOLDEN["gen_length"]
    # every revoked token is counted as an edit, per step and per sample: the commits beyond the answer's length
    assert [rec.edits for rec in out.records] == [c - GOLDEN["gen_length"] for c in commits]
    assert [sum(step.n_edited for step in rec.trace) for rec in out.records] == [rec.edits for rec in out.records]


def test_pair_mask_forward_equals_separate_forwards(tiny_llada_dir):
    """A block-diagonal ``query_key_mask`` gives each segment the logits of a forward on that segment alone (at its
    own position ids)."""
    model = load_model(tiny_llada_dir, device="cpu")
    ids = torch.tensor([prompts_for(model, (10,))[0]])
    T, k = ids.shape[1], 4
    seg = torch.arange(T) < k
    pair = (seg.view(T, 1) == seg.view(1, T)).unsqueeze(0)
    with torch.no_grad():
        joint = model(ids, query_key_mask=pair)
        first = model(ids[:, :k])
        second = model(ids[:, k:], position_ids=torch.arange(k, T).unsqueeze(0))
    torch.testing.assert_close(joint[0, :k], first[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(joint[0, k:], second[0], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(joint, model(ids), atol=1e-3)  # the mask does change what is computed


def _shadow_step_reference(model, x: torch.Tensor, P: int, lo: int, L: int, mask_id: int) -> torch.Tensor:
    """Shadow probability of each decoded block token, from the full logits of a forward whose mask is built entry
    by entry from WINO's description: the canvas sees the canvas; shadow query i (a mask token at position
    P + lo + i) sees every shadow query and every canvas position except P + lo + i."""
    T = x.shape[1]
    ext = torch.cat([x, torch.full((1, L), mask_id)], dim=1)
    pos = torch.cat([torch.arange(T), torch.arange(P + lo, P + lo + L)]).unsqueeze(0)
    pair = torch.zeros(1, T + L, T + L, dtype=torch.bool)
    for q in range(T + L):
        for k in range(T + L):
            if q < T:
                pair[0, q, k] = k < T
            else:
                pair[0, q, k] = k != P + lo + (q - T)
    logits = model(ext, position_ids=pos, query_key_mask=pair)[0, T:]
    back = torch.full((L,), float("inf"), dtype=torch.float64)
    for i in range(L):
        token = int(x[0, P + lo + i])
        if token != mask_id:
            back[i] = torch.softmax(logits[i].double(), -1)[token]
    return back


def test_shadow_forward_scores_decoded_tokens_as_the_reference(tiny_llada_dir):
    model = load_model(tiny_llada_dir, device="cpu")
    mask_id = model.config.mask_token_id
    prompt = prompts_for(model, (6,))[0]
    P, G, L = len(prompt), 8, 8
    answer = torch.tensor(prompts_for(model, (G,), seed=3)[0])
    answer[[1, 4, 5]] = mask_id
    x = torch.cat([torch.tensor(prompt), answer]).unsqueeze(0)
    policy = build_policy("wino")
    state = policy.init_state(1, G, L, x.device)
    cand = (answer == mask_id).unsqueeze(0)
    with torch.no_grad():
        policy.shadow_forward(model, x, torch.tensor([0]), state, cand, None, P, mask_id, torch.tensor([P]))
        want = _shadow_step_reference(model, x, P, 0, L, mask_id)
    torch.testing.assert_close(state.back[0], want, rtol=1e-6, atol=1e-9)


def test_padded_batch_decodes_as_each_row_alone(llada):
    prompts = prompts_for(llada, (9, 5, 12))
    policy = build_policy("wino", threshold=0.3, threshold_back=0.6)
    ids, mask = left_pad(prompts, llada.config.pad_token_id)
    batch = spec_generate(llada, ids, mask, gen_length=16, block_length=8, policy=policy)
    for b, p in enumerate(prompts):
        alone = spec_generate(llada, torch.tensor([p]), None, gen_length=16, block_length=8, policy=policy)
        assert batch.tokens[b].tolist() == alone.tokens[0].tolist()
        assert batch.records[b].nfe == alone.records[0].nfe
        assert batch.records[b].forward_positions == alone.records[0].forward_positions


def test_forward_positions_count_the_shadow_block(llada):
    prompt = prompts_for(llada, (7,))[0]
    out = spec_generate(llada, torch.tensor([prompt]), None, gen_length=16, block_length=8,
                        policy=build_policy("wino"))
    rec = out.records[0]
    assert rec.forward_positions == rec.nfe * (7 + 16 + 8)


@pytest.mark.parametrize(("cache", "rule", "cfg", "needle"), [
    ("prefix", None, 0.0, "without a cache"),
    ("none", "threshold", 0.0, "rule must be none"),
    ("none", None, 1.0, "classifier-free guidance"),
])
def test_refused_combinations(cache, rule, cfg, needle):
    with pytest.raises(ValueError, match=needle):
        DecodeSpec(Decoding(16, 8, build_policy("wino"), build_rule(rule) if rule else None, build_cache(cache)),
                   Sampling(cfg_scale=cfg))


@pytest.mark.parametrize(("params", "needle"), [({"threshold": 1.5}, "threshold must be"),
                                                ({"tau": 0.5}, "unknown")])
def test_bad_parameters_are_refused(params, needle):
    with pytest.raises(ValueError, match=needle):
        build_policy("wino", **params)


def test_dream_models_are_refused(dream):
    with pytest.raises(ValueError, match="shifted"):
        spec_generate(dream, torch.tensor([prompts_for(dream, (5,))[0]]), None, gen_length=16, block_length=8,
                      policy=build_policy("wino"))
