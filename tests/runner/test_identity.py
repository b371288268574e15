"""A run's identity: a rerun after a change of data, code or weights (or of its selection) starts a new run, or with
`resume_changed=true` resumes the old one saying what changed; a rerun that decodes nothing rewrites no file;
weights are digested in full, once per file version; study ids and committed results do not depend on the
checkout's path."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import dllm_bench.models.file_digest as file_digest
import dllm_bench.runner.identity as identity_module
from dllm_bench.models.loading import checkpoint_fingerprint
from dllm_bench.runner.config import PACKAGE_DIR
from dllm_bench.runner.execute import execute
from dllm_bench.runner.identity import code_digest
from dllm_bench.runner.store import read_jsonl
from dllm_bench.tasks.sudoku import TEST_SET_PATH

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def digest_cache(tmp_path, monkeypatch) -> Path:
    """Each test's own weight-digest cache."""
    path = tmp_path / "digest_cache.json"
    monkeypatch.setenv(file_digest.CACHE_ENV, str(path))
    return path


def counting_engine(calls: list[int]):
    """The real engine factory, counting how often a model is loaded."""
    from dllm_bench.runner.execute import default_engine_factory

    def factory(c, ctx):
        calls.append(1)
        return default_engine_factory(c, ctx)

    return factory


def no_engine(c, ctx):
    raise AssertionError("nothing was left to decode: no model may be loaded")


def run_folders(out: Path, name: str) -> list[str]:
    return sorted(p.name for p in (out / name).iterdir() if p.is_dir())


def test_an_edited_data_file_starts_a_new_run(compose_cfg, llada_overrides, tmp_path, caplog):
    data = tmp_path / "puzzles.jsonl"
    shutil.copy(TEST_SET_PATH, data)
    common = [*llada_overrides, "name=data", f"task.data_files={data}", "limit=2", "batch_size=2", "warmup=0"]
    first = execute(compose_cfg(*common))
    assert execute(compose_cfg(*common), engine_factory=no_engine)["run_id"] == first["run_id"]

    lines = data.read_text().splitlines()
    edited = json.loads(lines[0])
    edited["puzzle"] = edited["puzzle"][::-1]  # the first puzzle rewritten in place
    data.write_text("\n".join([json.dumps(edited), *lines[1:]]) + "\n")
    calls: list[int] = []
    with caplog.at_level(logging.WARNING, logger="dllm_bench.run"):
        second = execute(compose_cfg(*common), engine_factory=counting_engine(calls))
    assert second["run_id"] != first["run_id"] and calls == [1]
    assert run_folders(tmp_path / "results", "data") == sorted([first["run_id"], second["run_id"]])
    prompts = [r["prompt"] for r in read_jsonl(tmp_path / "results" / "data" / second["run_id"] / "samples.jsonl")]
    assert edited["puzzle"] in prompts[0]
    notice = [r.getMessage() for r in caplog.records if "starts anew" in r.getMessage()]
    assert notice and f"{first['run_id']} has this config with other data" in notice[0]


def test_resume_changed_resumes_the_old_run_and_says_what_changed(compose_cfg, llada_overrides, tmp_path, caplog,
                                                                  monkeypatch):
    common = [*llada_overrides, "name=code", "limit=3", "batch_size=1", "warmup=0"]
    first = execute(compose_cfg(*common, "limit=2"))
    before = code_digest()
    monkeypatch.setattr(identity_module, "code_digest", lambda: "0123456789abcdef")  # the package's code edited
    with caplog.at_level(logging.WARNING, logger="dllm_bench.run"):
        fresh = execute(compose_cfg(*common, "limit=2"), engine_factory=counting_engine(calls := []))
    assert fresh["run_id"] != first["run_id"] and calls == [1]

    rows_before = read_jsonl(tmp_path / "results" / "code" / first["run_id"] / "samples.jsonl")
    (tmp_path / "results" / "code" / fresh["run_id"] / "run.json").unlink()  # only the old run left to resume
    shutil.rmtree(tmp_path / "results" / "code" / fresh["run_id"])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dllm_bench.run"):
        resumed = execute(compose_cfg(*common, "limit=2", "resume_changed=true"), engine_factory=no_engine)
    assert resumed["run_id"] == first["run_id"]
    (line,) = [r.getMessage() for r in caplog.records if "resuming across a change" in r.getMessage()]
    assert line == (f"run {first['run_id']}: resuming across a change (resume_changed=true): "
                    f"code {before} -> 0123456789abcdef")
    info = json.loads((tmp_path / "results" / "code" / first["run_id"] / "run.json").read_text())
    assert [s["decoded"] for s in info["sessions"]] == [True, False]  # the resume is recorded, nothing decoded
    assert info["sessions"][-1]["identity_changes"] == [f"code {before} -> 0123456789abcdef"]
    assert info["finished_at"] == info["sessions"][0]["finished_at"]  # provenance: the session that decoded
    assert read_jsonl(tmp_path / "results" / "code" / first["run_id"] / "samples.jsonl") == rows_before

    longer = execute(compose_cfg(*common, "limit=3", "resume_changed=true"), engine_factory=counting_engine(calls))
    assert longer["run_id"] != first["run_id"] and len(calls) == 2  # another selection: a run of its own
    # the run now carries this identity: later reruns continue it, with or without the switch, and say nothing
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dllm_bench.run"):
        assert execute(compose_cfg(*common, "limit=2"), engine_factory=no_engine)["run_id"] == first["run_id"]
    assert not caplog.records


def test_offset_and_limit_are_runs_of_their_own(compose_cfg, llada_overrides, tmp_path):
    common = [*llada_overrides, "name=shards", "batch_size=2", "warmup=0"]
    a = execute(compose_cfg(*common, "offset=0", "limit=2"))
    b = execute(compose_cfg(*common, "offset=2", "limit=2"))
    assert a["run_id"] != b["run_id"]
    for row in (a, b):
        rows = read_jsonl(tmp_path / "results" / "shards" / row["run_id"] / "samples.jsonl")
        assert [r["doc_index"] for r in rows] == list(range(row["offset"], row["offset"] + 2))


def test_a_rerun_that_decodes_nothing_rewrites_no_file(compose_cfg, llada_overrides, tmp_path):
    cfg = compose_cfg(*llada_overrides, "name=noop", "limit=2", "batch_size=2", "warmup=0")
    row = execute(cfg)
    folder = tmp_path / "results" / "noop"
    files = [folder / "runs.csv", *(folder / row["run_id"]).iterdir()]
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    again = execute(cfg, engine_factory=no_engine)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files} == before
    assert again["git_commit"] == row["git_commit"] and again["finished_at"] == row["finished_at"]
    assert again["load_avg_start"] == row["load_avg_start"] and again["accuracy"] == row["accuracy"]
    info = json.loads((folder / row["run_id"] / "run.json").read_text())
    (session,) = info["sessions"]
    assert session["decoded"] and session["git_commit"] == row["git_commit"]
    assert session["identity"]["selection"] == {"offset": 0, "limit": 2}


def test_code_digest_follows_content_not_the_checkout_path_or_the_report_code(tmp_path):
    a, b = tmp_path / "a" / "dllm_bench", tmp_path / "b" / "dllm_bench"
    for root in (a, b):
        (root / "decoding").mkdir(parents=True)
        (root / "report").mkdir()
        (root / "decoding" / "rule.py").write_text("TAU = 0.9\n")
        (root / "report" / "table.py").write_text("WIDTH = 3\n")
    assert code_digest(a) == code_digest(b)  # two clones at two paths
    (b / "report" / "table.py").write_text("WIDTH = 4\n")  # reads results: no run's numbers depend on it
    assert code_digest(a) == code_digest(b)
    (b / "decoding" / "rule.py").write_text("TAU = 0.8\n")
    assert code_digest(a) != code_digest(b)


def synthetic_checkpoint(directory: Path, size: int) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"model_type": "llada"}')
    (directory / "model.safetensors").write_bytes(os.urandom(size))
    return directory / "model.safetensors"


def test_bytes_flipped_mid_file_in_a_large_weight_file_change_the_fingerprint(tmp_path):
    weights = synthetic_checkpoint(tmp_path / "ckpt", (33 << 20) + 12345)  # over 32 MiB: once fingerprinted by its ends
    before = checkpoint_fingerprint(tmp_path / "ckpt")
    data = bytearray(weights.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 64] = bytes(255 - x for x in data[mid : mid + 64])
    weights.write_bytes(bytes(data))
    head_and_tail = (16 << 20)
    assert weights.read_bytes()[:head_and_tail] == bytes(data[:head_and_tail])  # the ends are as they were
    after = checkpoint_fingerprint(tmp_path / "ckpt")
    assert after is not None and after != before


def test_small_checkpoints_keep_the_fingerprints_they_always_had(tmp_path):
    import hashlib

    weights = synthetic_checkpoint(tmp_path / "ckpt", 1000)
    digest = hashlib.sha256()
    for f in (tmp_path / "ckpt" / "config.json", weights):  # sorted names; whole content, as recorded in results/
        digest.update(f"{f.name}:{f.stat().st_size}:".encode() + f.read_bytes())
    assert checkpoint_fingerprint(tmp_path / "ckpt") == digest.hexdigest()[:16]


def test_the_full_digest_is_computed_once_per_path_size_and_mtime(tmp_path, monkeypatch, digest_cache):
    weights = synthetic_checkpoint(tmp_path / "ckpt", 3 << 20)
    calls = []
    real = file_digest.sha256_of
    monkeypatch.setattr(file_digest, "sha256_of", lambda p: calls.append(p) or real(p))
    first = file_digest.file_sha256(weights)
    assert file_digest.file_sha256(weights) == first and len(calls) == 1  # the second from the cache
    assert json.loads(digest_cache.read_text())[str(weights.resolve())]["sha256"] == first

    copy = tmp_path / "copy.safetensors"
    shutil.copy(weights, copy)
    assert file_digest.file_sha256(copy) == first and len(calls) == 2  # another path: its own entry

    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert file_digest.file_sha256(weights) == first and len(calls) == 3  # a new mtime: hashed again

    data = bytearray(weights.read_bytes())
    data[100] ^= 0xFF
    stat = weights.stat()
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the old mtime restored by hand
    assert file_digest.file_sha256(weights) != first and len(calls) == 4  # ctime cannot be restored


def test_a_study_id_does_not_depend_on_the_checkout_path(tmp_path, monkeypatch):
    import dllm_bench.runner.config as config_module
    from dllm_bench.search.sweep import study_digest

    digests = []
    for clone in ("a", "b"):
        package = tmp_path / clone / "dllm_bench"
        checkpoint = package / "tiny" / "checkpoints" / "tiny_llada"
        shutil.copytree(PACKAGE_DIR / "tiny" / "checkpoints" / "tiny_llada", checkpoint)
        monkeypatch.setattr(config_module, "PACKAGE_DIR", package)
        config = OmegaConf.create({"limit": 200, "model": {"name_or_path": str(checkpoint)},
                                   "rule": {"name": "frechet", "delta": 0.25}, "output_dir": str(tmp_path / clone)})
        digests.append(study_digest(config, ["rule.delta"], {"space": {"rule.delta": "interval"}}))
    assert digests[0] == digests[1]


def test_committed_results_hold_no_checkout_path():
    listed = subprocess.run(["git", "ls-files", "results"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    for name in listed.stdout.split():
        if name.endswith((".csv", ".json", ".jsonl", ".md")):
            text = (REPO / name).read_text(encoding="utf-8")
            assert "/dllm_bench/" not in text.replace("<dllm_bench>/", ""), f"{name} holds a checkout path"
