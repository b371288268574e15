"""End-to-end runs on a random tiny LLaDA: layout, rerun skips, SIGKILL + resume, traces."""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
import os
import signal
import time
from importlib import metadata
from pathlib import Path

import pytest

from dllm_bench.runner.execute import execute
from dllm_bench.runner.store import read_jsonl
from dllm_bench.runner.summary import TIMING_KEYS

REPO = Path(__file__).resolve().parents[2]
ROW_TIMING = ("wall_time_s", "latency_s", "decode_time_s", "rank", "batch_size")


def stable_rows(path: Path) -> list[dict]:
    """Sample rows without the measured (timing) and placement fields."""
    return [{k: v for k, v in r.items() if k not in ROW_TIMING} for r in read_jsonl(path)]


def stable_summary(row: dict) -> dict:
    skip = set(TIMING_KEYS) | {"started_at", "finished_at", "name", "world_size", "device_name", "output_dir",
                               "load_avg_start", "load_avg_end", "machine_loaded"}
    return {k: v for k, v in row.items() if k not in skip}


def run_dir(out: Path, name: str) -> Path:
    (d,) = [p for p in (out / name).iterdir() if p.is_dir()]
    return d


def test_layout_and_rerun_skips_finished(compose_cfg, llada_overrides, tmp_path):
    cfg = compose_cfg(*llada_overrides, "name=layout", "limit=6", "batch_size=4", "trace=true", "rule=frechet",
                  "cache=dual")
    row = execute(cfg)
    d = run_dir(tmp_path / "results", "layout")
    assert d.name == row["run_id"] and d.name.startswith("blocks-frechet-dual-")
    rows = read_jsonl(d / "samples.jsonl")
    assert [r["doc_index"] for r in rows] == list(range(6))
    assert {"sample_id", "prompt", "completion", "extracted", "gold", "correct", "nfe", "steps", "tokens_cut",
            "tokens_nonstop", "tokens_canvas", "tokens_all", "tokens_per_forward", "wall_time_s"} <= set(rows[0])
    assert all(r["nfe"] >= 1 and r["tokens_all"] == 24 for r in rows)
    assert row["n_samples"] == 6 and row["nfe_total"] == sum(r["nfe"] for r in rows)
    assert row["rule.delta"] == 0.25 and row["cache.name"] == "dual"
    info = json.loads((d / "run.json").read_text())
    assert info["config"]["rule"]["delta"] == 0.25 and info["environment"]["versions"]["torch"]
    assert {"git_commit", "torch_cuda", "python"} <= set(info["environment"]) and info["device_name"]
    version = metadata.version("math-verify")  # it decides MATH verdicts: recorded in every run's provenance
    assert info["scoring_versions"] == {"math-verify": version} == {"math-verify": row["math_verify"]}
    assert info["environment"]["versions"]["math-verify"] == version
    traces = read_jsonl(d / "traces.jsonl")
    assert len(traces) == 6 and sum(len(t["steps"]) for t in traces[:1]) == rows[0]["steps"]

    def no_engine(c, ctx):
        raise AssertionError("a finished run must not load a model")

    again = execute(cfg, engine_factory=no_engine)
    assert stable_summary(again) == stable_summary(row)
    assert len((tmp_path / "results" / "layout" / "runs.csv").read_text().strip().splitlines()) == 2


def test_sigkill_then_resume_gives_the_same_summary(compose_cfg, llada_overrides, tmp_path):
    common = [*llada_overrides, "limit=16", "batch_size=2", "rule=threshold", "rule.threshold=0.5", "warmup=0"]
    full = execute(compose_cfg(*common, "name=full"))

    killed_cfg = compose_cfg(*common, "name=killed")
    proc = mp.get_context("fork").Process(target=execute, args=(killed_cfg,))  # fork: no re-import cost
    proc.start()
    out = tmp_path / "results" / "killed"
    deadline = time.time() + 120
    while time.time() < deadline and proc.is_alive():
        files = list(out.glob("*/samples.jsonl"))
        if files and len(read_jsonl(files[0])) >= 4:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.join()
    assert proc.exitcode == -signal.SIGKILL, "the run finished before it could be killed"
    d = run_dir(tmp_path / "results", "killed")
    assert not (d / "run.json").exists() and 4 <= len(read_jsonl(d / "samples.jsonl")) < 16

    resumed = execute(compose_cfg(*common, "name=killed"))
    assert stable_summary(resumed) == stable_summary(full)
    assert stable_rows(d / "samples.jsonl") == stable_rows(run_dir(tmp_path / "results", "full") / "samples.jsonl")


@pytest.mark.parametrize("rule", ["oracle", "topk"])
def test_fixed_and_oracle_rules_run(compose_cfg, llada_overrides, rule):
    extra = ["policy.steps=24"] if rule == "topk" else []
    row = execute(compose_cfg(*llada_overrides, f"rule={rule}", *extra, "limit=2", "batch_size=2", "warmup=0"))
    assert row["n_samples"] == 2 and row["nfe_mean"] >= 1
    if rule == "topk":
        assert row["nfe_mean"] == 24




def test_two_gloo_processes_equal_one_process(compose_cfg, llada_overrides, tmp_path, two_ranks):
    common = [*llada_overrides, "limit=7", "batch_size=2", "rule=factor", "rule.f=1.0", "cache=prefix",
              "warmup=0"]
    single = execute(compose_cfg(*common, "name=single"))
    cfg = compose_cfg(*common, "name=parallel")
    two_ranks(cfg)
    d = run_dir(tmp_path / "results", "parallel")
    assert d.name == single["run_id"]
    assert sorted(p.name for p in d.iterdir()) == ["run.json", "samples.jsonl"]
    rows = read_jsonl(d / "samples.jsonl")
    assert sorted({r["rank"] for r in rows}) == [0, 1]
    assert stable_rows(d / "samples.jsonl") == stable_rows(run_dir(tmp_path / "results", "single") / "samples.jsonl")
    info = json.loads((d / "run.json").read_text())
    assert info["sessions"][-1]["world_size"] == 2
    parallel_row = {**info["summary"], "run_id": info["run_id"]}
    assert stable_summary(parallel_row) == stable_summary({k: single[k] for k in parallel_row})


@pytest.mark.parametrize("decoding", [["policy=dream", "policy.alg=entropy", "policy.steps=12"],
                                      ["policy=slowfast_dream"]])
def test_dream_model_runs(compose_cfg, tiny_dream_dir, tmp_path, decoding):
    cfg = compose_cfg("model=tiny_dream", f"model.name_or_path={tiny_dream_dir}", f"output_dir={tmp_path}",
                      "progress=false", "num_threads=1", "block_length=24", "limit=2", "batch_size=2", "warmup=0",
                      *decoding)
    row = execute(cfg)
    assert row["n_samples"] == 2 and row["model.flavour"] == "dream"
    if "policy.steps=12" in decoding:
        assert row["nfe_mean"] == 12


def test_vision_model_reads_the_task_images(compose_cfg, tmp_path):
    """LLaDA-V on MathVista rows: each document's image goes through the model's build_inputs."""
    from PIL import Image

    from dllm_bench.models.llada_v import make_random_llada_v_checkpoint

    ckpt = make_random_llada_v_checkpoint(tmp_path / "tiny_llada_v", seed=0)
    shared = REPO / "tests" / "fixtures" / "tasks" / "mathvista"
    rows = json.loads((shared / "testmini.json").read_text())
    pids = list(rows)[:2]
    data = tmp_path / "mathvista"
    (data / "images").mkdir(parents=True)
    (data / "testmini.json").write_text(json.dumps({p: rows[p] for p in pids}))
    queries = json.loads((shared / "query.json").read_text())
    (data / "query.json").write_text(json.dumps({p: queries[p] for p in pids}))
    for i, p in enumerate(pids):
        Image.new("RGB", (40 + 10 * i, 30), color=(10 * i, 100, 200)).save(tmp_path / "mathvista" / rows[p]["image"],
                                                                        format="PNG")
    cfg = compose_cfg("model=llada_v", f"model.name_or_path={ckpt}", "task=mathvista",
                      f"task.data_files={data / 'testmini.json'}", f"task.image_root={data}",
                      f"output_dir={tmp_path / 'results'}", "progress=false", "num_threads=1", "limit=2",
                      "batch_size=2", "warmup=0")
    row = execute(cfg)
    assert row["n_samples"] == 2 and row["nfe_mean"] >= 1
    with pytest.raises(FileNotFoundError, match="image_root"):
        execute(compose_cfg("model=llada_v", f"model.name_or_path={ckpt}", "task=mathvista",
                            f"task.data_files={data / 'testmini.json'}", f"output_dir={tmp_path / 'other'}",
                            "progress=false", "num_threads=1", "limit=1", "warmup=0"))


def test_runs_csv_header_and_machine_columns_do_not_depend_on_run_order(compose_cfg, llada_overrides, tmp_path):
    settings = [["rule=frechet", "cache=dual"], ["rule=threshold", "rule.threshold=0.5"]]
    texts = []
    for sub, order in (("ab", settings), ("ba", settings[::-1])):
        for extra in order:
            execute(compose_cfg(*llada_overrides, f"output_dir={tmp_path / sub}", "name=order", "limit=1",
                                "batch_size=1", "warmup=0", *extra))
        texts.append((tmp_path / sub / "order" / "runs.csv").read_text().splitlines())
    assert texts[0][0] == texts[1][0]
    header = texts[0][0].split(",")
    assert header[:2] == ["run_id", "name"] and header[-1] == "finished_at"
    with open(tmp_path / "ab" / "order" / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        assert int(r["cpu_count"]) >= 1 and r["task_docs"] == "500"
        assert float(r["load_avg_start"]) >= 0 and float(r["load_avg_end"]) >= 0
        loaded = max(float(r["load_avg_start"]), float(r["load_avg_end"])) > int(r["cpu_count"])
        assert r["machine_loaded"] == str(loaded)
