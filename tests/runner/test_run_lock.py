"""One writer per run folder: a twin process waits for the folder's lock (or, asked not to wait, refuses in one
line); a line torn or fused by a killed writer is reported with its file and line, set aside, and never blocks a
resume."""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dllm_bench.runner.execute import execute
from dllm_bench.runner.store import LOCK_NAME, ResultsStore, RunLocked, read_jsonl

REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from dllm_bench.runner.store import ResultsStore
store = ResultsStore(sys.argv[1], "exp", "run")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
store.append_samples([{"sample_id": "s9", "doc_index": 9}])
store.close()
"""


def row(i: int) -> dict:
    return {"sample_id": f"s{i}", "doc_index": i, "correct": True}


def holder(tmp_path: Path, seconds: float) -> subprocess.Popen:
    """Another process holding the run folder `exp/run` for `seconds`."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), str(seconds)], stdout=subprocess.PIPE,
                            text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_twin_refuses_in_one_line_when_not_waiting(tmp_path):
    proc = holder(tmp_path, 30)
    try:
        with pytest.raises(RunLocked) as err:
            ResultsStore(tmp_path, "exp", "run", wait=False)
        assert str(err.value).startswith(f"{tmp_path / 'exp' / 'run'} is being written by pid {proc.pid} since ")
        assert "\n" not in str(err.value)
    finally:
        proc.kill()
        proc.wait()


def test_a_twin_waits_for_the_writer_then_sees_its_rows(tmp_path, caplog):
    proc = holder(tmp_path, 2)
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="dllm_bench.run"):
        store = ResultsStore(tmp_path, "exp", "run")
    waited = time.perf_counter() - start
    proc.wait()
    assert waited > 0.5 and store.finished_ids() == {"s9"}  # the writer's row, read after it let go
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"{tmp_path / 'exp' / 'run'} is being written by pid {proc.pid} since ")
    assert line.endswith(": waiting for it to finish")
    store.close()
    assert not (store.run_dir / LOCK_NAME).exists()


def test_a_killed_holder_releases_the_folder(tmp_path):
    proc = holder(tmp_path, 60)
    proc.kill()
    proc.wait()
    store = ResultsStore(tmp_path, "exp", "run", wait=False)  # the kernel let go of the dead process's lock
    store.close()


def test_a_fused_line_mid_file_is_set_aside_named_and_its_document_runs_again(tmp_path, caplog):
    store = ResultsStore(tmp_path, "exp", "run")
    store.append_samples([row(0), row(1)])
    store.close()
    fused = '{"sample_id": "s2", "doc_ind' + json.dumps(row(3)) + "\n"  # a killed write completed by a twin's
    with open(store.samples_path, "a") as f:
        f.write(fused)
        f.write(json.dumps(row(4)) + "\n")
    with caplog.at_level(logging.WARNING, logger="dllm_bench.run"):
        assert {r["sample_id"] for r in read_jsonl(store.samples_path)} == {"s0", "s1", "s4"}  # a reader skips it
    assert f"{store.samples_path}: line 3 is not a JSON row" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dllm_bench.run"):
        again = ResultsStore(tmp_path, "exp", "run")  # the next writer sets it aside
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"{store.samples_path}: line 3 not a complete JSON row")
    assert again.finished_ids() == {"s0", "s1", "s4"}
    assert (store.run_dir / "samples.jsonl.bad").read_text() == fused
    again.append_samples([row(2), row(3)])
    assert sorted(r["sample_id"] for r in read_jsonl(again.samples_path)) == ["s0", "s1", "s2", "s3", "s4"]
    again.close()


def test_a_run_resumes_over_a_corrupt_line(compose_cfg, llada_overrides, tmp_path):
    common = [*llada_overrides, "name=torn", "limit=4", "batch_size=1", "warmup=0"]
    full = execute(compose_cfg(*common))
    d = tmp_path / "results" / "torn" / full["run_id"]
    lines = (d / "samples.jsonl").read_text().splitlines(keepends=True)
    damaged = lines[:1] + [lines[1][:40] + lines[2]] + lines[3:]  # rows 1 and 2 fused into one line
    (d / "samples.jsonl").write_text("".join(damaged))
    (d / "run.json").unlink()
    resumed = execute(compose_cfg(*common))
    assert resumed["n_samples"] == 4 and resumed["accuracy"] == full["accuracy"]
    assert [r["doc_index"] for r in read_jsonl(d / "samples.jsonl")] == [0, 1, 2, 3]


def _run(cfg) -> None:
    execute(cfg)


def test_two_commands_on_one_folder_decode_each_document_once(compose_cfg, llada_overrides, tmp_path):
    cfg = compose_cfg(*llada_overrides, "name=twins", "limit=6", "batch_size=1", "warmup=0")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_run, args=(cfg,)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    (d,) = [p for p in (tmp_path / "results" / "twins").iterdir() if p.is_dir()]
    rows = read_jsonl(d / "samples.jsonl")
    assert sorted(r["doc_index"] for r in rows) == list(range(6))
    info = json.loads((d / "run.json").read_text())
    assert sum(s["decoded"] for s in info["sessions"]) == 1  # the twin found every document done
