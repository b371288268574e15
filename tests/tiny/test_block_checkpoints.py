"""The shipped trained block-diffusion checkpoints: the format's files, its network, small, and a card rendered
from the recorded training log and evaluation."""

import json
from pathlib import Path

import pytest

from dllm_bench.models import load_model
from dllm_bench.models.architectures import architecture_of
from dllm_bench.tiny.block_card import FORMATS, render

CHECKPOINTS = Path(__file__).resolve().parents[2] / "dllm_bench" / "tiny" / "checkpoints"
SHIPPED = [f for f in sorted(FORMATS) if (CHECKPOINTS / f"tiny_{f}").is_dir()]
FILES = {"config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
         "tokenizer_config.json", "train_log.json", "eval_results_block.json", "MODEL_CARD.md"}


@pytest.mark.parametrize("fmt", SHIPPED)
def test_shipped_block_checkpoint_is_the_format_trained_and_small(fmt):
    directory = CHECKPOINTS / f"tiny_{fmt}"
    assert FILES <= {p.name for p in directory.iterdir()}
    raw = json.loads((directory / "config.json").read_text())
    random_raw = json.loads((CHECKPOINTS / f"random_{fmt}" / "config.json").read_text())
    assert raw["architectures"] == random_raw["architectures"] and set(raw) == set(random_raw) | {"_name_or_path"}
    assert (directory / "model.safetensors").stat().st_size <= (CHECKPOINTS / "tiny_llada" / "model.safetensors").stat().st_size
    model = load_model(directory, device="cpu")
    assert isinstance(model, type(architecture_of(raw).network(architecture_of(raw).parse(raw, ""))))
    assert model.config.attention == "block_causal"
    log = json.loads((directory / "train_log.json").read_text())
    first = (log.get("init_log") or log)["curve"][0]["loss"]  # from random init (stage 1 when there are two)
    assert log["config"]["flavour"] == fmt and log["curve"][-1]["loss"] < first / 4
    assert (directory / "MODEL_CARD.md").read_text() == render(fmt)
    results = json.loads((directory / "eval_results_block.json").read_text())["results"]
    assert {r["early_stop"] for r in results} == {True, False} and all(r["puzzles"] >= 100 for r in results)
