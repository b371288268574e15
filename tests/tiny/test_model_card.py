"""The model card says how busy the CPU was while its tokens/s were measured, where the results record it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dllm_bench.tiny.model_card import render_model_card

CHECKPOINT = Path(__file__).resolve().parents[2] / "dllm_bench" / "tiny" / "checkpoints" / "tiny_llada"


@pytest.fixture
def card_dir(tmp_path: Path) -> Path:
    """The shipped card's inputs with one results file (the weights file only for its size)."""
    for name in ("train_log.json", "config.json", "model.safetensors"):
        shutil.copy(CHECKPOINT / name, tmp_path / name)
    shutil.copy(CHECKPOINT / "eval_results_gen24_block24.json", tmp_path / "eval_results_gen24_block24.json")
    return tmp_path


def _with_load(directory: Path, load: list[float] | None) -> str:
    path = directory / "eval_results_gen24_block24.json"
    doc = json.loads(path.read_text())
    doc.pop("load_avg", None)
    if load is not None:
        doc.update(load_avg=load, cpu_count=2)
    path.write_text(json.dumps(doc))
    return render_model_card(directory)


def test_a_loaded_machine_is_named_beside_the_speed_column(card_dir):
    loaded = _with_load(card_dir, [9.5, 10.25])
    assert "Load average 9.50 → 10.25 on 2 CPUs: a loaded machine, so tokens/s here understate" in loaded
    idle = _with_load(card_dir, [0.4, 1.5])
    assert "Load average 0.40 → 1.50 on 2 CPUs." in idle and "a loaded machine" not in idle
    assert "Load average" not in _with_load(card_dir, None)  # results from before the load was recorded
