"""Host-device syncs per decoding step stay within budget on the accelerator's code path (counted on CPU
tensors: a sync is defined by the op), and that path decodes the same tokens and NFE as the CPU's."""

from __future__ import annotations

from functools import cache

import pytest
import torch

from dllm_bench.decoding import generate
from dllm_bench.decoding.syncs import SyncCounter
from dllm_bench.models.host import accelerator_path

GEN, BLOCK = 32, 8


@pytest.fixture(scope="module")
def counting(load_script):
    return load_script("count_syncs")


@cache
def _model(counting, flavour, switches=()):
    return counting.tiny_model(flavour, switches)


def _settings():
    from dllm_bench.runner.combinations import exercises

    return [e.label for e in exercises(gen_length=GEN, block_length=BLOCK)]


@pytest.mark.parametrize("setting", _settings())
def test_batch_1_stays_within_the_sync_budget_with_the_cpu_path_tokens(counting, setting):
    exercise = counting.settings(GEN, BLOCK)[setting]
    model = _model(counting, exercise.flavour, exercise.model_switches)
    prompts = counting.sudoku_prompts(model, 1)
    spec = counting.decode_spec(setting, GEN, BLOCK)
    counted = counting.count(model, prompts, spec)
    budget = counting.budget(exercise)
    assert counted["total"] <= budget * counted["steps"], (setting, counted["by_op"])
    with torch.no_grad():
        cpu = generate(model, prompts, None, spec, reference=counting.reference(model, 1, GEN))
    assert torch.equal(counted["tokens"], cpu.tokens) and counted["nfe"] == [r.nfe for r in cpu.records]


def test_the_counter_counts_each_kind_of_host_read():
    x = torch.arange(6)
    with SyncCounter() as c:
        bool(x.any()), int(x[0]), x.sum().item(), x.tolist(), x.nonzero(), x[x > 2], torch.bincount(x)
        torch.equal(x, x), x.cpu(), torch.as_tensor(0.5), torch.tensor([1, 2])
        x + 1, x[1:3], torch.where(x > 2, x, 0), torch.full((2,), 0.5)  # none of these
    assert c.total == 11, c.by_op


def test_the_accelerator_path_decodes_a_padded_batch_as_the_cpu_path(counting):
    from .conftest import left_pad

    model = _model(counting, "llada")
    rows = counting.sudoku_prompts(model, 3).tolist()
    ids, mask = left_pad([rows[0], rows[1][3:], rows[2][5:]], model.config.pad_token_id)
    for setting in ("blocks/threshold/dual@llada", "blocks/threshold/prefix@llada", "blocks/threshold/dllm@llada"):
        spec = counting.decode_spec(setting, GEN, BLOCK)
        with torch.no_grad():
            cpu = generate(model, ids, mask, spec)
            with accelerator_path():
                acc = generate(model, ids, mask, spec)
        assert torch.equal(acc.tokens, cpu.tokens) and [r.nfe for r in acc.records] == [r.nfe for r in cpu.records]


@pytest.fixture(scope="module")
def moe_models(tmp_path_factory):
    """The MoE networks: a random tiny LLaDA-MoE (published format) and the trained tiny LLaDA2 (BailingMoeV2)."""
    from dllm_bench.models import load_model
    from dllm_bench.models.tiny_moe import make_random_moe_checkpoint
    from dllm_bench.tiny.card_runs import CHECKPOINTS

    moe = load_model(make_random_moe_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny_moe", seed=0), device="cpu")
    return {"llada_moe": moe, "llada2": load_model(CHECKPOINTS / "tiny_llada2", device="cpu")}


@pytest.mark.parametrize(("network", "setting"), [
    ("llada_moe", "blocks/threshold/none@llada"), ("llada_moe", "blocks/threshold/prefix@llada"),
    ("llada_moe", "blocks/threshold/dual@llada"), ("llada_moe", "blocks/threshold/dllm@llada"),
    ("llada2", "llada2/none/none@llada"), ("llada2", "llada21_dllm/none/none@llada"),
    ("llada2", "dmax_math/none/none@llada")])
def test_moe_networks_stay_within_the_sync_budget_with_the_cpu_path_tokens(counting, moe_models, network, setting):
    """The MoE layers add no host read to a step: a decode on the accelerator's path stays within its setting's
    budget, with the CPU path's tokens and NFE (the loop they replaced read the expert group sizes once per layer)."""
    model = moe_models[network]
    block = getattr(model.config, "block_size", BLOCK)  # LLaDA2's block-causal attention runs at its own block
    exercise = counting.settings(GEN, block)[setting]
    prompts = torch.randint(0, 90, (2, 13), generator=torch.Generator().manual_seed(1))
    spec = counting.decode_spec(setting, GEN, block)
    with torch.no_grad():
        with accelerator_path(), SyncCounter() as counted:
            acc = generate(model, prompts, None, spec)
        cpu = generate(model, prompts, None, spec)
    steps = max(r.nfe for r in acc.records)
    assert counted.total <= counting.budget(exercise) * steps, (setting, dict(counted.by_op))
    assert torch.equal(acc.tokens, cpu.tokens) and [r.nfe for r in acc.records] == [r.nfe for r in cpu.records]
