"""A few training steps of a very small model end in a checkpoint that load_model reads; resume continues."""

import json

import torch

from dllm_bench.models import load_model
from dllm_bench.tiny.train import TrainConfig, learning_rate, parse_args, train


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
        model = load_model(out, device="cpu")
        assert model.config.flavour == flavour and model.config.is_instruct
        assert model.config.tensor_naming == ("olmo" if flavour == "llada" else "llama")
        assert json.loads((out / "train_log.json").read_text())["config"]["steps"] == 2


def test_resume_matches_an_uninterrupted_run(tmp_path):
    full = train(small("llada", 4), tmp_path / "full", tmp_path / "full.pt")
    train(small("llada", 4), tmp_path / "part", tmp_path / "part.pt", stop_at=2)
    resumed = train(small("llada", 4), tmp_path / "part", tmp_path / "part.pt", resume=True)
    assert [e["step"] for e in resumed["curve"]] == [1, 2, 3, 4]
    assert [e["loss"] for e in resumed["curve"]] == [e["loss"] for e in full["curve"]]
    a = load_model(tmp_path / "full", device="cpu").state_dict()
    b = load_model(tmp_path / "part", device="cpu").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_learning_rate_schedule_and_cli_validation():
    cfg = TrainConfig(steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert learning_rate(cfg, 0) == 0.1 and learning_rate(cfg, 9) == 1.0
    assert abs(learning_rate(cfg, 99) - 0.1) < 1e-3
    cfg, out, state, resume = parse_args(["--flavour", "dream", "--steps", "7"])
    assert cfg.steps == 7 and out.name == "tiny_dream" and state.parent.name == "dream" and not resume
