"""Results store: torn tails discarded, shards merged once in document order, runs.csv upserted."""

from __future__ import annotations

import csv
import json
import math

import pytest

from dllm_bench.runner.config import compute_run_id, flatten
from dllm_bench.runner.store import ResultsStore, read_jsonl
from dllm_bench.runner.summary import summarise, wilson_interval

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


def row(i: int, correct: bool = True, rank: int = 0) -> dict:
    return {"sample_id": f"s{i}", "doc_index": i, "correct": correct, "nfe": 4 + i, "steps": 4,
            "tokens_cut": 10, "tokens_nonstop": 12, "tokens_all": 24, "wall_time_s": 0.5, "latency_s": 1.0,
            "rank": rank}


def test_torn_last_line_is_ignored_and_repaired(tmp_path):
    store = ResultsStore(tmp_path, "exp", "run")
    store.append_samples([row(0), row(1)])
    with open(store.samples_path, "a") as f:
        f.write('{"sample_id": "s2", "doc_ind')  # a write cut by SIGKILL
    assert store.finished_ids() == {"s0", "s1"}
    store.close()  # a killed writer's lock is gone with it
    again = ResultsStore(tmp_path, "exp", "run")
    again.append_samples([row(2)])
    assert [r["sample_id"] for r in read_jsonl(again.samples_path)] == ["s0", "s1", "s2"]


def test_merge_folds_rank_files_in_document_order_without_duplicates(tmp_path):
    r0 = ResultsStore(tmp_path, "exp", "run", rank=0, world_size=2)
    r1 = ResultsStore(tmp_path, "exp", "run", rank=1, world_size=2)
    r0.append_samples([row(0), row(2), row(4)])
    r1.append_samples([row(1), row(3), row(2)])
    assert r0.finished_ids() == {f"s{i}" for i in range(5)}
    merged = r0.merge()
    assert [r["sample_id"] for r in merged] == [f"s{i}" for i in range(5)]
    r0.close()
    r1.close()
    assert sorted(p.name for p in r0.run_dir.iterdir()) == ["samples.jsonl"]
    assert [r["sample_id"] for r in read_jsonl(r0.samples_path)] == [f"s{i}" for i in range(5)]


def test_runs_csv_upsert_replaces_same_run_and_unions_columns(tmp_path):
    a = ResultsStore(tmp_path, "exp", "run-a")
    b = ResultsStore(tmp_path, "exp", "run-b")
    a.upsert_runs_csv({"run_id": "run-a", "rule.threshold": 0.9, "accuracy": 0.5})
    b.upsert_runs_csv({"run_id": "run-b", "rule.delta": 0.2, "accuracy": 0.7})
    a.upsert_runs_csv({"run_id": "run-a", "rule.threshold": 0.9, "accuracy": 0.6})
    with open(a.runs_csv) as f:
        rows = list(csv.DictReader(f))
    assert [r["run_id"] for r in rows] == ["run-a", "run-b"]  # rows by run id, whatever order they arrived in
    assert rows[0]["accuracy"] == "0.6" and rows[0]["rule.delta"] == ""
    assert list(rows[0]) == ["run_id", "rule.delta", "rule.threshold", "accuracy"]


def test_runs_csv_columns_in_schema_order_whatever_the_arrival_order(tmp_path):
    runs = [{"run_id": "r1", "name": "x", "rule.name": "frechet", "rule.delta": 0.2, "accuracy": 0.5,
             "n_samples": 4, "finished_at": "t", "cpu_count": 2},
            {"finished_at": "t", "accuracy": 0.7, "cache.name": "dual", "rule.threshold": 0.9, "run_id": "r2",
             "name": "x", "rule.name": "threshold", "n_samples": 4, "load_avg_start": 0.5}]
    texts = []
    for order, sub in ((runs, "a"), (runs[::-1], "b")):
        for r in order:
            ResultsStore(tmp_path / sub, "exp", r["run_id"]).upsert_runs_csv(r)
        texts.append((tmp_path / sub / "exp" / "runs.csv").read_text())
    assert texts[0] == texts[1]
    assert texts[0].splitlines()[0] == ("run_id,name,cache.name,rule.delta,rule.name,rule.threshold,"
                                         "n_samples,accuracy,cpu_count,load_avg_start,finished_at")


def test_wilson_interval_known_values():
    low, high = wilson_interval(8, 10)
    assert math.isclose(low, 0.4901624, abs_tol=1e-6) and math.isclose(high, 0.9433178, abs_tol=1e-6)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0


def test_summary_counts_by_rule():
    rows = [row(0, True), row(1, False), row(2, True), row(3, True)]
    s = summarise(rows, "cut")
    assert s["n_samples"] == 4 and s["n_correct"] == 3 and s["accuracy"] == 0.75
    assert s["nfe_total"] == 4 + 5 + 6 + 7 and s["tokens_total"] == 40
    assert math.isclose(s["tokens_per_forward"], 40 / 22) and math.isclose(s["tokens_per_s"], 40 / 2.0)
    assert summarise(rows, "all")["tokens_total"] == 96
    assert summarise(list(reversed(rows)), "cut") == s
    assert math.isnan(s["forward_positions_total"])  # rows without the field (older samples)
    counted = [{**r, "forward_positions": 100 + i} for i, r in enumerate(rows)]
    assert summarise(counted, "cut")["forward_positions_total"] == 406


def test_run_id_ignores_bookkeeping_keys_only():
    base = {"name": "a", "output_dir": "x", "limit": 5, "offset": 0, "progress": True, "trace": False,
            "warmup": 1, "gen_length": 24, "policy": {"name": "blocks", "steps": None},
            "rule": {"name": "frechet", "delta": 0.2},
            "cache": {"name": "dual"}, "model": {"device": "cuda:0"}}
    same = {**base, "name": "b", "output_dir": "y", "limit": None, "offset": 3, "progress": False,
            "trace": True, "warmup": 0, "model": {"device": "cuda:3"}}
    assert compute_run_id(base) == compute_run_id(same)
    assert compute_run_id(base).startswith("blocks-frechet-dual-")
    assert compute_run_id(base) != compute_run_id({**base, "rule": {"name": "frechet", "delta": 0.3}})
    assert compute_run_id(base) != compute_run_id({**base, "gen_length": 32})
    assert compute_run_id(base) != compute_run_id({**base, "model": {"device": "cpu"}})
    # model.compile: eager (false) hashes as before the key existed, a compiled run is its own
    assert compute_run_id(base) == compute_run_id({**base, "model": {"device": "cuda:0", "compile": False}})
    assert compute_run_id(base) != compute_run_id({**base, "model": {"device": "cuda:0", "compile": "default"}})


def test_flatten_dotted_keys():
    assert flatten({"a": 1, "b": {"c": 2, "d": {"e": [1, 2]}}}) == {"a": 1, "b.c": 2, "b.d.e": json.dumps([1, 2])}


def test_progress_postfix_shows_running_accuracy_nfe_and_throughput():
    from dllm_bench.runner.progress import RunProgress

    bar = RunProgress(total=4, initial=0, desc="t", enabled=True, count_rule="cut")
    bar.update([row(0, True), row(1, False)])
    assert bar.bar.n == 2 and bar.bar.postfix == "acc=0.500, nfe=4.5, tok_s=20.0"
    bar.close()


def test_multi_task_submitit_job_exports_torchrun_variables(monkeypatch):
    from dllm_bench.runner.sharding import export_submitit_env

    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "unset")  # records the original state, so teardown removes what export sets
        monkeypatch.delenv(key)
    env = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "42", "SLURM_NTASKS": "4", "SLURM_PROCID": "3",
           "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[01-02]"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert export_submitit_env()
    import os

    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("3", "4", "1")
    assert os.environ["MASTER_ADDR"] == "gpu01"
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.delenv("WORLD_SIZE")
    assert not export_submitit_env()


def test_a_packed_run_reads_the_same_rows_and_a_rerun_rewrites_nothing(tmp_path):
    """Per-sample files packed for the repository (pack_run): the same rows for every reader, fixed bytes, no
    rewrite by a rerun that decodes nothing, and folded back into plain files by one that adds rows."""
    from dllm_bench.runner.store import pack_run, packed

    store = ResultsStore(tmp_path, "exp", "run")
    store.append_samples([row(1), row(0)])
    store.append_traces([{"sample_id": "s0", "doc_index": 0, "steps": []}])
    plain = store.merge()
    store.write_run_json({"run_id": "run"})
    store.close()
    run_dir = store.run_dir
    pack_run(run_dir)
    assert not store.samples_path.exists() and packed(store.samples_path).exists()
    first = packed(store.samples_path).read_bytes()
    assert pack_run(run_dir) == 0 and packed(store.samples_path).read_bytes() == first  # nothing left to pack
    again = ResultsStore(tmp_path, "exp", "run")
    assert read_jsonl(again.samples_path) == plain and again.finished_ids() == {"s0", "s1"}
    assert again.merge() == plain and not again.samples_path.exists()  # a no-op rerun leaves the packed file
    again.append_samples([row(2)])  # a resume that decodes one more document
    assert [r["sample_id"] for r in again.merge()] == ["s0", "s1", "s2"]
    assert again.samples_path.exists() and not packed(again.samples_path).exists()
    assert [r["sample_id"] for r in read_jsonl(again.traces_path)] == ["s0"]
    again.close()


def test_packing_leaves_a_run_with_shards_to_merge_alone(tmp_path):
    from dllm_bench.runner.store import pack_run

    r1 = ResultsStore(tmp_path, "exp", "run", rank=1, world_size=2)
    r1.append_samples([row(1)])
    (r1.run_dir / "run.json").write_text("{}")
    assert pack_run(r1.run_dir) == 0 and (r1.run_dir / "samples.rank1.jsonl").exists()
    r1.close()
