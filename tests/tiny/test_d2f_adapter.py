"""D2F's objective, the trainable LoRA and the shipped trained D2F adapters (PEFT format, a card rendered from the
recorded training log and evaluation)."""

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from dllm_bench.models import load_model
from dllm_bench.models.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, D2F_TARGET_MODULES, save_adapter
from dllm_bench.models.tiny_lora import make_random_d2f_adapter
from dllm_bench.tiny.d2f_card import render
from dllm_bench.tiny.d2f_objective import d2f_loss, mask_answer_blocks, monotonic_block_ratios
from dllm_bench.tiny.lora_training import attach_lora, lora_pairs
from dllm_bench.tiny.train_d2f import D2FTrainConfig, parse_args, train_adapter

CHECKPOINTS = Path(__file__).resolve().parents[2] / "dllm_bench" / "tiny" / "checkpoints"
FLAVOURS = ("llada", "dream")


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_block_ratios_never_decrease_and_stay_in_the_published_range(batch, blocks, seed):
    p = monotonic_block_ratios(batch, blocks, torch.Generator().manual_seed(seed))
    assert p.shape == (batch, blocks)
    assert (p[:, 0] >= 0.2).all() and (p[:, 0] < 0.7).all() and (p <= 0.7 + 1e-6).all()
    assert (p[:, 1:] >= p[:, :-1]).all()


def test_each_answer_block_is_masked_at_its_own_ratio():
    answers = torch.arange(10).repeat(4000, 1)  # blocks of 4: [0, 4), [4, 8), [8, 10)
    noisy, masked, p = mask_answer_blocks(answers, 99, 4, torch.Generator().manual_seed(0))
    assert torch.equal(noisy == 99, masked) and torch.equal(noisy[~masked], answers[~masked])
    for lo, hi in ((0, 4), (4, 8), (8, 10)):
        assert (p[:, lo:hi] == p[:, lo:lo + 1]).all()  # one ratio per block
    assert abs(masked.float().mean() - p.mean()) < 0.01
    with pytest.raises(ValueError, match="block_size=0"):
        mask_answer_blocks(answers, 99, 0)


def test_loss_is_the_mean_over_masked_tokens_of_ce_over_ratio():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5, 7, generator=gen)
    soft = torch.softmax(torch.randn(3, 5, 7, generator=gen), -1)
    hard = torch.randint(0, 7, (3, 5), generator=gen)
    masked = torch.rand(3, 5, generator=gen) < 0.5
    p = torch.rand(3, 5, generator=gen) * 0.5 + 0.2
    for targets in (soft, hard):
        terms = []
        for b in range(3):
            for i in range(5):
                if masked[b, i]:
                    logq = torch.log_softmax(logits[b, i], -1)
                    ce = -(targets[b, i] * logq).sum() if targets.dtype != torch.long else -logq[targets[b, i]]
                    terms.append(ce / p[b, i])
        torch.testing.assert_close(d2f_loss(logits, targets, masked, p), torch.stack(terms).mean())


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_trained_network_is_the_adapter_it_writes(tmp_path, flavour):
    """attach_lora starts at the base; after changing A and B, the adapter written from lora_pairs and merged at load
    gives the adapted network's logits."""
    base_dir = CHECKPOINTS / f"tiny_{flavour}"
    net = load_model(base_dir, device="cpu")
    ids = torch.tensor([[5, 9, 17, 23, 31, 40, 2, 11]])
    with torch.no_grad():
        before = net(ids)
        params = attach_lora(net, r=3, lora_alpha=6.0, seed=0)
        torch.testing.assert_close(net(ids), before, rtol=0, atol=0)
        gen = torch.Generator().manual_seed(2)
        for p in params:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
        adapted = net(ids)
    assert not torch.allclose(adapted, before, atol=1e-3)
    out = tmp_path / "adapter"
    save_adapter(out, lora_pairs(net), base=str(base_dir), r=3, lora_alpha=6.0,
                 target_modules=D2F_TARGET_MODULES[flavour])
    with torch.no_grad():
        torch.testing.assert_close(load_model(out, device="cpu")(ids), adapted, rtol=1e-5, atol=1e-5)
    assert set(load_file(str(out / ADAPTER_WEIGHTS))) == set(load_file(str(
        make_random_d2f_adapter(base_dir, tmp_path / "random", r=3) / ADAPTER_WEIGHTS)))


def test_train_adapter_writes_a_loadable_peft_adapter(tmp_path):
    cfg = D2FTrainConfig(flavour="dream", steps=2, batch_size=4, warmup_steps=1, log_every=1, r=2, lora_alpha=2.0)
    log = train_adapter(cfg, tmp_path / "a")
    assert [e["step"] for e in log["curve"]] == [1, 2]
    assert json.loads((tmp_path / "a" / ADAPTER_CONFIG).read_text())["base_model_name_or_path"] == "../tiny_dream"
    assert set(load_file(str(tmp_path / "a" / ADAPTER_WEIGHTS))) == set(load_file(str(
        CHECKPOINTS / "tiny_dream_d2f" / ADAPTER_WEIGHTS)))
    with pytest.raises(SystemExit) as err:
        parse_args(["--flavour", "llada", "--block-sizes", "0"])
    assert err.value.code == 2


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_shipped_adapter_is_trained_peft_and_beats_its_base_under_d2f(flavour):
    directory = CHECKPOINTS / f"tiny_{flavour}_d2f"
    assert {ADAPTER_CONFIG, ADAPTER_WEIGHTS, "train_log.json", "eval_results_d2f.json", "MODEL_CARD.md"} <= {
        p.name for p in directory.iterdir()}
    cfg = json.loads((directory / ADAPTER_CONFIG).read_text())
    assert cfg["peft_type"] == "LORA" and sorted(cfg["target_modules"]) == sorted(D2F_TARGET_MODULES[flavour])
    log = json.loads((directory / "train_log.json").read_text())
    assert log["config"]["flavour"] == flavour and log["curve"][-1]["loss"] < log["curve"][0]["loss"]
    assert (directory / "MODEL_CARD.md").read_text() == render(flavour)
    results = json.loads((directory / "eval_results_d2f.json").read_text())["results"]
    assert all(r["puzzles"] >= 100 for r in results)
    for r in results:
        if r["model"] == "adapter":
            base = next(b for b in results if b["model"] == "base" and all(
                b[k] == r[k] for k in ("block_length", "early_stop")))
            assert r["accuracy"] > base["accuracy"]
