"""The batched mode (`timing_docs`): accuracy/NFE at batch B, a batch-1 timing pass over the first N documents."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dllm_bench.runner.engine import build_engine
from dllm_bench.runner.execute import execute
from dllm_bench.runner.interface import Engine
from dllm_bench.runner.store import read_jsonl
from dllm_bench.runner.summary import SUMMARY_COLUMNS, TIMING_PASS_COLUMNS
from dllm_bench.runner.validate import ConfigError

REPO = Path(__file__).resolve().parents[2]
COMMON = ["limit=10", "offset=3", "batch_size=4", "warmup=0", "rule=threshold", "rule.threshold=0.5"]


def run_dir(out: Path, name: str) -> Path:
    (d,) = [p for p in (out / name).iterdir() if p.is_dir()]
    return d




class CountingEngine(Engine):
    """The real engine, recording the batch size of every `generate` call; optionally failing at one call."""

    def __init__(self, inner: Engine, calls: list[int], fail_at: int | None = None):
        self.inner, self.calls, self.fail_at = inner, calls, fail_at
        self.tokenizer, self.stop_token_ids, self.device_name = inner.tokenizer, inner.stop_token_ids, inner.device_name

    def prepare(self, prompts, docs, seeds):
        return self.inner.prepare(prompts, docs, seeds)

    def generate(self, prompts, docs, seeds, stop_strings, **extra):
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise RuntimeError("interrupted")
        self.calls.append(len(docs))
        return self.inner.generate(prompts, docs, seeds, stop_strings, **extra)


def counting(calls: list[int], fail_at: int | None = None):
    return lambda c, ctx: CountingEngine(build_engine(c, ctx), calls, fail_at)


def no_engine(c, ctx):
    raise AssertionError("nothing is left to decode: no model may load")


def test_batched_rows_and_a_batch1_pass_over_the_first_documents_after_offset(compose_cfg, llada_overrides, tmp_path):
    cfg = compose_cfg(*llada_overrides, *COMMON, "name=mode", "timing_docs=5")
    calls: list[int] = []
    row = execute(cfg, engine_factory=counting(calls))
    assert calls == [4, 4, 2, 1, 1, 1, 1, 1]  # the batched pass, then one document at a time
    d = run_dir(tmp_path / "results", "mode")
    samples = {r["doc_index"]: r for r in read_jsonl(d / "samples.jsonl")}
    timed = read_jsonl(d / "timing.jsonl")
    assert sorted(samples) == list(range(3, 13))
    assert [r["doc_index"] for r in timed] == [3, 4, 5, 6, 7]  # the first timing_docs after offset
    assert {r["batch_size"] for r in timed} == {1} and {samples[i]["batch_size"] for i in range(3, 7)} == {4}
    for r in timed:  # on CPU a prompt decodes the same alone as in its batch
        batched = samples[r["doc_index"]]
        assert (r["raw_completion"], r["nfe"], r["tokens_cut"]) == (batched["raw_completion"], batched["nfe"],
                                                                    batched["tokens_cut"])
    tokens = sum(r["tokens_cut"] for r in timed)
    wall = sum(r["wall_time_s"] for r in timed)
    assert row["timing_docs"] == 5 and row["timing_batch_size"] == 1 and row["timing_n_samples"] == 5
    assert row["timing_agreement"] == 1.0 and row["timing_tokens_total"] == tokens
    assert row["timing_tokens_per_s"] == pytest.approx(tokens / wall)
    assert row["timing_latency_s_mean"] == pytest.approx(sum(r["latency_s"] for r in timed) / 5)
    assert row["tokens_total"] == sum(r["tokens_cut"] for r in samples.values())  # the batched pass's own figures
    with open(tmp_path / "results" / "mode" / "runs.csv", newline="") as f:
        header = next(csv.reader(f))
    tail = header[header.index("n_samples"):header.index("task_docs")]
    assert tail == [*SUMMARY_COLUMNS, *TIMING_PASS_COLUMNS]
    config = header[2:header.index("n_samples")]
    assert config == sorted(config) and "timing_docs" in config
    # the timing pass shares the run's folder: the same settings without it are the same, finished run
    plain = execute(compose_cfg(*llada_overrides, *COMMON, "name=mode"), engine_factory=no_engine)
    assert plain["run_id"] == row["run_id"] and "timing_n_samples" not in plain


def test_no_timing_docs_adds_no_timing_columns(compose_cfg, llada_overrides, tmp_path):
    row = execute(compose_cfg(*llada_overrides, "limit=4", "batch_size=2", "warmup=0", "name=plain"))
    assert not any(k.startswith("timing_") and k != "timing_docs" for k in row) and row["timing_docs"] is None
    assert not (run_dir(tmp_path / "results", "plain") / "timing.jsonl").exists()


def test_resume_keeps_every_decoded_row(compose_cfg, llada_overrides, tmp_path):
    common = [*llada_overrides, *COMMON, "name=resume"]
    calls: list[int] = []
    execute(compose_cfg(*common), engine_factory=counting(calls))  # batched only
    assert calls == [4, 4, 2]
    calls.clear()
    with pytest.raises(RuntimeError, match="interrupted"):  # the batch-1 pass stops after two documents
        execute(compose_cfg(*common, "timing_docs=3"), engine_factory=counting(calls, fail_at=2))
    d = run_dir(tmp_path / "results", "resume")
    assert calls == [1, 1] and [r["doc_index"] for r in read_jsonl(d / "timing.jsonl")] == [3, 4]
    calls.clear()
    row = execute(compose_cfg(*common, "timing_docs=3"), engine_factory=counting(calls))
    assert calls == [1] and row["timing_n_samples"] == 3
    calls.clear()
    row = execute(compose_cfg(*common, "timing_docs=5"), engine_factory=counting(calls))  # only the new two
    assert calls == [1, 1] and row["timing_n_samples"] == 5 and row["timing_agreement"] == 1.0
    again = execute(compose_cfg(*common, "timing_docs=5"), engine_factory=no_engine)
    assert again["timing_tokens_total"] == row["timing_tokens_total"] and again["n_samples"] == 10
    fewer = execute(compose_cfg(*common, "timing_docs=2"), engine_factory=no_engine)  # the first two of the five
    timed = read_jsonl(d / "timing.jsonl")
    assert fewer["timing_n_samples"] == 2 and fewer["timing_tokens_total"] == sum(r["tokens_cut"] for r in timed[:2])


@pytest.mark.slow
def test_two_gloo_processes_share_the_timing_pass(compose_cfg, llada_overrides, tmp_path, two_ranks):
    common = [*llada_overrides, "limit=7", "batch_size=2", "warmup=0", "timing_docs=5"]
    single = execute(compose_cfg(*common, "name=single"))
    cfg = compose_cfg(*common, "name=parallel")
    two_ranks(cfg)
    d = run_dir(tmp_path / "results", "parallel")
    assert sorted(p.name for p in d.iterdir()) == ["run.json", "samples.jsonl", "timing.jsonl"]
    timed = read_jsonl(d / "timing.jsonl")
    assert [r["doc_index"] for r in timed] == list(range(5)) and sorted({r["rank"] for r in timed}) == [0, 1]
    stable = lambda rows: [(r["doc_index"], r["raw_completion"], r["nfe"]) for r in rows]  # noqa: E731
    assert stable(timed) == stable(read_jsonl(run_dir(tmp_path / "results", "single") / "timing.jsonl"))
    with open(tmp_path / "results" / "parallel" / "runs.csv", newline="") as f:
        (parallel,) = list(csv.DictReader(f))
    assert parallel["timing_n_samples"] == "5" and float(parallel["timing_agreement"]) == 1.0
    assert int(parallel["timing_tokens_total"]) == single["timing_tokens_total"]


@pytest.mark.parametrize("extra, message", [
    (["timing_docs=0"], "timing_docs=0 is not allowed: an integer >= 1 or null is required"),
    (["timing_docs=-3"], "timing_docs=-3 is not allowed: an integer >= 1 or null is required"),
    (["timing_docs=2.5"], "timing_docs=2.5 is not allowed: an integer or null is required"),
    (["limit=10", "timing_docs=11"], "timing_docs=11 is not allowed: at most limit=10"),
    (["batch_size=1", "timing_docs=4"], "timing_docs=4 is not allowed: only with batch_size > 1"),
    (["offset=495", "timing_docs=10"], "timing_docs=10 is not allowed: offset=495, limit=null select 5 documents"),
])
def test_bad_timing_docs_are_refused_before_any_folder(compose_cfg, llada_overrides, tmp_path, extra, message):
    with pytest.raises(ConfigError) as err:
        execute(compose_cfg(*llada_overrides, "name=bad", *extra), engine_factory=no_engine)
    assert message in str(err.value)
    assert not (tmp_path / "results" / "bad").exists()


def test_command_line_refuses_timing_docs_above_limit_with_one_line(tiny_llada_dir, tmp_path):
    out = tmp_path / "results"
    done = subprocess.run([sys.executable, "-m", "dllm_bench.run", f"model.name_or_path={tiny_llada_dir}",
                           f"output_dir={out}", "limit=4", "timing_docs=5"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == ["dllm-bench: config error: timing_docs=5 is not allowed: at most limit=4 (the batch-1 pass "
                     "times the first timing_docs of the run's documents)"]
    assert not (out / "default").exists()


def test_a_rescoring_keeps_the_batch1_pass(compose_cfg, llada_overrides, tmp_path):
    from dllm_bench.runner.rescore import rescore

    row = execute(compose_cfg(*llada_overrides, *COMMON, "name=rescored", "timing_docs=4"))
    d = run_dir(tmp_path / "results", "rescored")
    (again,) = rescore(d, "paper")
    assert again["run_id"] == row["run_id"] + ".paper"
    timed = read_jsonl(d / "timing.jsonl")
    assert again["timing_n_samples"] == 4 and again["timing_agreement"] == 1.0
    assert again["timing_tokens_total"] == sum(r["tokens_cut_paper"] for r in timed)  # counted as scoring=paper does
