"""The Python API: ``dllm_bench.evaluate`` runs what the command runs and returns its rows; ``encode_prompts``
builds the runner's inputs."""

from __future__ import annotations

import json

import pytest
import torch

import dllm_bench
from dllm_bench.runner.validate import ConfigError


def test_evaluate_returns_the_runs_rows_and_summary(tiny_llada_dir, tmp_path):
    keys = {"model.name_or_path": str(tiny_llada_dir), "output_dir": str(tmp_path / "results"), "limit": 4,
            "batch_size": 2, "num_threads": 1, "progress": False, "rule": "threshold", "cache": "dual"}
    rows = dllm_bench.evaluate(keys)
    run = rows.attrs["run"]
    assert list(rows["doc_index"]) == [0, 1, 2, 3] and run["n_samples"] == 4
    assert run["accuracy"] == pytest.approx(rows["correct"].mean())
    # the same rows the command writes: runs.csv holds the summary, the run folder the samples
    folder = tmp_path / "results" / "default" / run["run_id"]
    on_disk = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["sample_id"] for r in on_disk) == sorted(rows["sample_id"])
    again = dllm_bench.evaluate(keys)  # a rerun resumes: nothing decoded, the same rows
    assert again.attrs["run"]["run_id"] == run["run_id"] and list(again["completion"]) == list(rows["completion"])


def test_evaluate_refuses_a_bad_value_in_one_line(tiny_llada_dir, tmp_path):
    with pytest.raises(ConfigError) as err:
        dllm_bench.evaluate({"model.name_or_path": str(tiny_llada_dir), "output_dir": str(tmp_path), "rule": "threshold",
                             "rule.threshold": 1.5})
    assert "threshold" in str(err.value) and "\n" not in str(err.value)


def test_encode_prompts_are_the_runners_inputs(tiny_llada_dir):
    from dllm_bench.runner.engine import DecodingEngine

    model = dllm_bench.load_model(tiny_llada_dir, device="cpu")
    ids, mask = dllm_bench.encode_prompts(model, ["..../..1./3.../..32", "1234/..../..../...."])
    assert ids.shape == mask.shape and ids.shape[0] == 2 and bool(mask.bool().all())  # same length, no padding
    short, short_mask = dllm_bench.encode_prompts(model, ["1", "1234"], chat=False)
    assert short_mask.tolist()[0][0] == 0 and short[0, 0] == model.config.pad_token_id  # padded on the left
    text = model.tokenizer.apply_chat_template([{"role": "user", "content": "..../..1./3.../..32"}],
                                               add_generation_prompt=True, tokenize=False)
    engine = DecodingEngine.__new__(DecodingEngine)
    engine.tokenizer, engine.config, engine.device = model.tokenizer, model.config, torch.device("cpu")
    want, _ = engine.encode([text], chat=True)
    assert torch.equal(ids[:1], want)


def test_report_calls_read_what_the_runner_wrote(tiny_llada_dir, tmp_path):
    keys = {"model.name_or_path": str(tiny_llada_dir), "output_dir": str(tmp_path), "limit": 2, "batch_size": 2,
            "num_threads": 1, "progress": False, "rule": "threshold", "name": "mine"}
    run = dllm_bench.evaluate(keys).attrs["run"]
    runs = dllm_bench.read_results(tmp_path)
    assert list(runs["results"]) == ["mine"] and list(runs["run_id"]) == [run["run_id"]]
    points = dllm_bench.pareto_points(runs)
    assert len(points) == 1 and points["accuracy"].iloc[0] == pytest.approx(run["accuracy"])
    png = dllm_bench.plot_pareto(runs, tmp_path / "figure", title="mine")
    assert png == tmp_path / "figure.png" and png.stat().st_size > 1000
    assert dllm_bench.tables(runs) == []  # "mine" is no reproducible table's folder
    assert dllm_bench.read_results(tmp_path / "absent").empty and dllm_bench.confidence_profiles(tmp_path) == []
