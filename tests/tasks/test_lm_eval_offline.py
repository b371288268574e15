"""The lm-eval route offline: a local task YAML via --include_path, `pretrained=`, no spurious device warning."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import lm_eval.tasks as lm_tasks
import pytest
import torch
import yaml
from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker

from dllm_bench.lm_eval_adapter import DllmBenchLM, device_requested

REPO = Path(__file__).resolve().parents[2]


def test_pretrained_is_the_model_path(tiny_llada_dir):
    lm = DllmBenchLM(pretrained=str(tiny_llada_dir), gen_length=16, block_length=16, device="cpu")
    assert lm.model_name == str(tiny_llada_dir)
    with pytest.raises(ValueError, match="model='.*' is not allowed: choose one of .*tiny_llada.*pretrained="):
        DllmBenchLM(pretrained=str(tiny_llada_dir), model=str(tiny_llada_dir))
    with pytest.raises(ValueError, match="as pretrained="):
        DllmBenchLM()
    # lm-eval takes the output folder's name from pretrained=
    args = f"pretrained={tiny_llada_dir},rule=frechet,cache=dual"
    assert GeneralConfigTracker._get_model_name(args) == str(tiny_llada_dir)


def test_device_default_of_the_lm_eval_cli_is_not_a_request():
    assert not device_requested("cuda:0", argv=["lm_eval", "--model", "dllm_bench"])
    assert device_requested("cuda:0", argv=["lm_eval", "--device", "cuda:0"])
    assert device_requested("cuda:0", argv=["lm_eval", "--device=cuda:0"])
    assert device_requested("cuda", argv=["lm_eval"]) and not device_requested(None, argv=[])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback to cpu happens only without CUDA")
def test_no_cuda_warning_when_no_device_was_requested(tiny_llada_dir, caplog, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lm_eval", "--model", "dllm_bench"])
    with caplog.at_level(logging.INFO, logger="dllm_bench.lm_eval_adapter"):
        lm = DllmBenchLM(pretrained=str(tiny_llada_dir), gen_length=16, block_length=16, device="cuda:0")
    assert lm.device == torch.device("cpu")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    monkeypatch.setattr(sys, "argv", ["lm_eval", "--device", "cuda:0"])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dllm_bench.lm_eval_adapter"):
        DllmBenchLM(pretrained=str(tiny_llada_dir), gen_length=16, block_length=16, device="cuda:0")
    assert any("requested but CUDA is not available" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_lm_eval_cli_on_a_local_task_yaml(tiny_llada_dir, fixtures_dir, tmp_path):
    """docs/tasks.md's offline recipe: lm-eval's gsm8k.yaml pointed at local files, found with --include_path."""
    data = fixtures_dir / "gsm8k"
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "gsm8k_local.yaml").write_text(yaml.safe_dump({
        "task": "gsm8k_local", "include": str(Path(lm_tasks.__file__).parent / "gsm8k" / "gsm8k.yaml"),
        "dataset_path": "json", "dataset_name": None,
        "dataset_kwargs": {"data_files": {"train": str(data / "train.jsonl"), "test": str(data / "test.jsonl")}}}))
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "dllm_bench.lm_eval_adapter", "--model", "dllm_bench", "--model_args",
         f"pretrained={tiny_llada_dir},rule=frechet,gen_length=16,block_length=16,model.chat=false",
         "--tasks", "gsm8k_local", "--include_path", str(tmp_path / "tasks"), "--limit", "2", "--num_fewshot", "1",
         "--output_path", str(tmp_path / "out")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    (folder,) = (tmp_path / "out").iterdir()
    assert folder.name == str(tiny_llada_dir).replace("/", "__")
    assert list(folder.glob("results_*.json"))
    assert "requested but CUDA" not in done.stderr + done.stdout
    after = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    assert after == before
