"""A few training steps of a very small model end in a checkpoint that load_model reads; resume continues."""

import json

import pytest
import torch

from dllm_bench.models import load_model
from dllm_bench.models.moe import MoEDiffusionLM
from dllm_bench.tiny.train import TrainConfig, learning_rate, parse_args, train, two_stage


def small(flavour: str, steps: int) -> TrainConfig:
    return TrainConfig(flavour=flavour, steps=steps, batch_size=4, d_model=16, n_layers=1, n_heads=2,
                       mlp_hidden_size=32, threads=1, log_every=1, save_every=2, monitor_every=1000,
                       warmup_steps=1, answer_lengths=[20, 24], monitor_puzzles=4)


def test_train_writes_a_loadable_checkpoint_for_each_flavour(tmp_path):
    for flavour in ("llada", "dream"):
        out = tmp_path / flavour
        log = train(small(flavour, 2), out, tmp_path / f"{flavour}.pt")
        assert [e["step"] for e in log["curve"]] == [1, 2]
        assert all(torch.isfinite(torch.tensor(e["loss"])) for e in log["curve"])
        assert len(log["monitor"]) == 1 and 0.0 <= log["monitor"][0]["sequential_solved"] <= 1.0
        assert 0.0 <= log["monitor"][0]["frechet_solved"] <= 1.0
        model = load_model(out, device="cpu")
        assert model.config.flavour == flavour and model.config.is_instruct
        assert model.config.tensor_naming == ("olmo" if flavour == "llada" else "llama")
        assert json.loads((out / "train_log.json").read_text())["config"]["steps"] == 2


def test_train_llada_moe_writes_a_published_format_checkpoint_and_balances_routing(tmp_path):
    """The MoE flavour trains the LLaDA-MoE network (experts, routers, qk-norm) and its load-balancing loss
    reaches the routers: the same run without it ends with other router weights."""
    runs = {}
    for coef in (0.01, 0.0):
        cfg = small("llada_moe", 2)
        cfg.mlp_hidden_size, cfg.num_experts, cfg.num_experts_per_tok, cfg.router_aux_loss_coef = 8, 4, 2, coef
        out = tmp_path / f"moe{coef}"
        log = train(cfg, out, tmp_path / f"moe{coef}.pt")
        assert all(0.0 < e["aux_loss"] for e in log["curve"])  # 2 (= top-k) when perfectly balanced
        runs[coef] = load_model(out, device="cpu")
    model = runs[0.01]
    assert isinstance(model, MoEDiffusionLM) and model.config.num_experts == 4 and model.config.is_instruct
    raw = json.loads((tmp_path / "moe0.01" / "config.json").read_text())
    assert raw["architectures"] == ["LLaDAMoEModelLM"] and raw["expert_intermediate_size"] == 8
    names = set(model.state_dict())
    assert "model.layers.0.mlp.experts.3.down_proj.weight" in names and "model.layers.0.self_attn.q_norm.weight" in names
    a, b = runs[0.01].state_dict(), runs[0.0].state_dict()
    assert not torch.equal(a["model.layers.0.mlp.gate.weight"], b["model.layers.0.mlp.gate.weight"])
    with pytest.raises(ValueError, match="num_experts_per_tok=5"):
        TrainConfig(flavour="llada_moe", num_experts=4, num_experts_per_tok=5)


def test_resume_matches_an_uninterrupted_run(tmp_path):
    full = train(small("llada", 4), tmp_path / "full", tmp_path / "full.pt")
    train(small("llada", 4), tmp_path / "part", tmp_path / "part.pt", stop_at=2)
    resumed = train(small("llada", 4), tmp_path / "part", tmp_path / "part.pt", resume=True)
    assert [e["step"] for e in resumed["curve"]] == [1, 2, 3, 4]
    assert [e["loss"] for e in resumed["curve"]] == [e["loss"] for e in full["curve"]]
    a = load_model(tmp_path / "full", device="cpu").state_dict()
    b = load_model(tmp_path / "part", device="cpu").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sample_and_posterior_targets_train_differently_on_open_puzzles(tmp_path):
    """The target kind reaches the update: same seed and data, different weights after open puzzles."""
    post_cfg, sample_cfg = small("llada", 2), small("llada", 2)
    post_cfg.batch_size = sample_cfg.batch_size = 16  # some rows keep several completions given the visible cells
    sample_cfg.targets = "sample"
    post = train(post_cfg, tmp_path / "post", tmp_path / "post.pt")
    sample = train(sample_cfg, tmp_path / "sample", tmp_path / "sample.pt")
    assert post["config"]["targets"] == "posterior" and sample["config"]["targets"] == "sample"
    a = load_model(tmp_path / "post", device="cpu").state_dict()
    b = load_model(tmp_path / "sample", device="cpu").state_dict()
    assert not all(torch.equal(a[k], b[k]) for k in a)


def test_two_stage_runs_minimal_then_open_puzzles_from_the_stage1_weights(tmp_path):
    cfg = small("dream", 2)
    cfg.stage1_steps = 2
    log = two_stage(cfg, tmp_path / "final", tmp_path / "state" / "state.pt")
    assert log["config"]["puzzles"] == "open" and log["init_log"]["config"]["puzzles"] == "minimal"
    assert log["init_log"]["config"]["lr"] == 2e-3 and log["config"]["init_from"] == str(tmp_path / "state" / "stage1" / "checkpoint")
    stage1 = load_model(tmp_path / "state" / "stage1" / "checkpoint", device="cpu").state_dict()
    final = load_model(tmp_path / "final", device="cpu").state_dict()
    assert stage1.keys() == final.keys() and not all(torch.equal(stage1[k], final[k]) for k in stage1)
    # a stage-2 run of 0 updates from that checkpoint would keep its weights: init_from really loads them
    cfg0 = small("dream", 1)
    cfg0.init_from, cfg0.lr, cfg0.weight_decay = str(tmp_path / "state" / "stage1" / "checkpoint"), 0.0, 0.0
    train(cfg0, tmp_path / "copy", tmp_path / "copy.pt")
    copy = load_model(tmp_path / "copy", device="cpu").state_dict()
    assert all(torch.equal(stage1[k], copy[k]) for k in stage1)
    cfg.init_from = "somewhere"
    with pytest.raises(ValueError, match="init_from='somewhere' with stage1_steps=2"):
        two_stage(cfg, tmp_path / "x", tmp_path / "x.pt")


def test_learning_rate_schedule_and_cli_validation():
    cfg = TrainConfig(steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert learning_rate(cfg, 0) == 0.1 and learning_rate(cfg, 9) == 1.0
    assert abs(learning_rate(cfg, 99) - 0.1) < 1e-3
    cfg, out, state, resume = parse_args(["--flavour", "dream", "--steps", "7"])
    assert cfg.steps == 7 and out.name == "tiny_dream" and state.parent.name == "dream" and not resume
    assert cfg.stage1_steps == 600 and cfg.puzzles == "open" and cfg.init_from is None
    assert cfg.targets == "posterior" and parse_args(["--flavour", "llada", "--targets", "sample"])[0].targets == "sample"
    with pytest.raises(ValueError, match="puzzles 'hard'"):
        TrainConfig(puzzles="hard")
    with pytest.raises(ValueError, match="targets 'soft'"):
        TrainConfig(targets="soft")
