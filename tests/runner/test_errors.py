"""Errors after validation: one line `dllm-bench: error: ...`, exit status 2, no run folder left behind."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

import dllm_bench.runner.store as store_module
from dllm_bench.run import main
from dllm_bench.runner.combinations import options

SUDOKU = Path(__file__).resolve().parents[2] / "dllm_bench" / "tasks" / "sudoku_data" / "sudoku_test.jsonl"


def run_folders(results: Path) -> list[Path]:
    """Every folder under results except Hydra's own logs."""
    return [p for p in results.rglob("*") if p.is_dir() and ".hydra" not in p.parts]


def assert_one_line(code: int, lines: list[str], *needles: str) -> None:
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("dllm-bench: error: ") or lines[0].startswith("dllm-bench: config error: ")
    for needle in needles:
        assert needle in lines[0]


@pytest.fixture()
def base(llada_overrides: list[str]) -> list[str]:
    return [*llada_overrides, "name=errs", "limit=2", "batch_size=2", "warmup=0"]


def test_malformed_data_line(base, tmp_path, run_cli):
    data = tmp_path / "bad.jsonl"
    data.write_text("".join(SUDOKU.read_text().splitlines(keepends=True)[:3]) + '{"broken\n')
    code, lines = run_cli(*base, f"task.data_files={data}")
    assert_one_line(code, lines, f"{data}: line 4 is not valid JSON")
    assert run_folders(tmp_path / "results") == []


@pytest.mark.parametrize("damage", ["truncated", "mis-shaped"])
def test_damaged_weights(base, tmp_path, tiny_llada_dir, damage, run_cli):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_llada_dir, ckpt)
    if damage == "truncated":
        weights = ckpt / "model.safetensors"
        with open(weights, "r+b") as f:
            f.truncate(weights.stat().st_size // 2)
        needle = "model.safetensors"
    else:
        config = json.loads((ckpt / "config.json").read_text())
        config["d_model"] *= 2
        (ckpt / "config.json").write_text(json.dumps(config))
        needle = "has shape"
    code, lines = run_cli(*base, f"model.name_or_path={ckpt}")
    assert_one_line(code, lines, needle, str(ckpt))
    assert run_folders(tmp_path / "results") == []


def test_hub_id_without_network(monkeypatch, base, tmp_path, run_cli):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    code, lines = run_cli(*base, "model.name_or_path=nobody-here/no-such-model")
    assert_one_line(code, lines, "'nobody-here/no-such-model' is neither a local directory nor a downloadable hub")
    assert run_folders(tmp_path / "results") == []


def test_read_only_results_dir(monkeypatch, base, tmp_path, run_cli):
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: make the permission check see what a user would
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if mode == os.W_OK and
                            str(p).startswith(str(results)) else real(p, mode, **kw))
        monkeypatch.setattr(Path, "mkdir", _mkdir_denied_under(results))
    try:
        code, lines = run_cli(*base, f"hydra.run.dir={tmp_path / 'hydra'}")
    finally:
        results.chmod(0o755)
    assert_one_line(code, lines, "Permission denied", str(results))
    assert run_folders(results) == []


def _mkdir_denied_under(root: Path):
    real = Path.mkdir

    def mkdir(self: Path, *args, **kwargs):
        if str(self).startswith(str(root) + os.sep):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    return mkdir


class _FullDisk:
    """A text file whose writes fail as on a full disk (the file itself exists, empty)."""

    def __init__(self, handle):
        self.handle = handle

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def test_full_disk(monkeypatch, base, tmp_path, run_cli):
    def full_open(path, mode="r", *args, **kwargs):
        handle = open(path, mode, *args, **kwargs)
        return _FullDisk(handle) if "samples" in str(path) and mode in ("a", "w") else handle

    monkeypatch.setattr(store_module, "open", full_open, raising=False)
    code, lines = run_cli(*base)
    assert_one_line(code, lines, "No space left on device", "samples.jsonl")
    assert run_folders(tmp_path / "results") == []


def test_traceback_on_request(monkeypatch, capsys, base, tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"broken\n')
    monkeypatch.setattr(sys, "argv", ["dllm-bench", *base, f"task.data_files={data}"])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    monkeypatch.delenv("DLLM_BENCH_TRACEBACK", raising=False)
    try:
        with pytest.raises(ValueError, match="line 1 is not valid JSON"):
            main()
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize(("selection", "needle"), [
    (["offset=500"], "offset=500, limit=2 select no documents: task 'sudoku' has 500"),
    (["limit=0"], "offset=0, limit=0 select no documents: task 'sudoku' has 500"),
])
def test_empty_selection_refused(base, tmp_path, selection, needle, run_cli):
    code, lines = run_cli(*base, *selection)
    assert_one_line(code, lines, needle)
    assert not (tmp_path / "results" / "errs").exists()


def test_hydra_errors_are_one_line(base, run_cli):
    code, lines = run_cli(*base, "rule=bogus")
    assert_one_line(code, lines, f"rule='bogus' is not allowed: choose one of {', '.join(options('rule'))} (files in conf/rule/)")
    assert "search path" not in lines[0]


# Everything a user can mistype: one line naming key, value and what is allowed, exit 2, before any load.
BAD_INPUTS = [
    (["rul=frechet"], "rul='frechet' is not allowed: unknown key at the top level; allowed: backend, batch_size"),
    (["rule=frechet", "rule.detla=0.2"], "rule.detla=0.2 is not allowed: unknown key for rule 'frechet'; allowed: delta, name"),
    (["rule=frechet", "rule.delta=high"], "rule.delta='high' is not allowed: a number is required"),
    (["cache=dllm", "cache.prompt_interval=ten"], "cache.prompt_interval='ten' is not allowed: an integer is required"),
    (["gen_length=abc"], "gen_length='abc' is not allowed: an integer is required"),
    (["early_stop=maybe"], "early_stop='maybe' is not allowed: true or false is required"),
    (["task.shots=3"], "task.shots=3 is not allowed: unknown key for task 'sudoku'"),
    (["model.revision=main"], "model.revision='main' is not allowed: unknown key in group 'model'"),
    (["selector=frechet"], "(selector is now rule: rule=frechet)"),
    (["output_dir="], "output_dir='' is not allowed: a directory path is required"),
    (["name=../x"], "name='../x' is not allowed: one folder name inside output_dir is required"),
    (["name="], "name='' is not allowed: one folder name inside output_dir is required"),
    (["model.device=cuda:7"], "model.device='cuda:7' is not allowed: "),
    (["cache=dkv"], "cache=dkv: cache 'dkv' runs as published only with policy 'blocks' (steps) and rule 'topk'"),
    (["cache=dkv", "cache.refresh_every=0"], "dkv refresh_every must be >= 1"),
]


@pytest.mark.parametrize(("extra", "needle"), BAD_INPUTS, ids=[" ".join(e) for e, _ in BAD_INPUTS])
def test_bad_input_is_one_line_before_any_load(monkeypatch, base, tmp_path, extra, needle, run_cli):
    import dllm_bench.runner.engine as engine_module

    monkeypatch.chdir(tmp_path)  # an empty output_dir would land here (and Hydra's logs at the filesystem root)
    monkeypatch.setattr(engine_module, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    code, lines = run_cli(*base, *extra)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("dllm-bench: config error: ") and needle in lines[0], lines
    assert "+" + extra[-1] not in lines[0]  # never Hydra's "To append to your config use +key" hint
    assert [p for p in run_folders(tmp_path) if p != tmp_path / "results"] == []


def test_missing_cuda_is_a_config_error(monkeypatch, base, run_cli):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, lines = run_cli(*base, "model.device=cuda")
    assert_one_line(code, lines, "model.device='cuda' is not allowed: no CUDA device visible; use cpu or null")


def test_ctrl_c_is_one_line_and_keeps_finished_rows(monkeypatch, base, tmp_path, run_cli):
    import dllm_bench.runner.execute as execute_module

    real, calls = execute_module.decode_batch, []

    def interrupted_on_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(execute_module, "decode_batch", interrupted_on_second_batch)
    code, lines = run_cli(*base, "limit=6", "batch_size=2")
    assert code == 130 and lines == ["dllm-bench: interrupted; 2 rows kept, rerun to resume"]
    (samples,) = (tmp_path / "results" / "errs").glob("*/samples.jsonl")
    assert len(samples.read_text().splitlines()) == 2


def test_help_opens_with_what_the_program_does_and_three_commands(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["dllm-bench", "--help"])
    try:
        with pytest.raises(SystemExit) as exit_info:
            main()
    finally:
        GlobalHydra.instance().clear()
    assert exit_info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("dllm-bench: decode a benchmark with a diffusion LM")
    assert lines[2] == "Common commands:"
    assert [line.split()[0] for line in lines[3:6]] == ["dllm-bench"] * 3 and lines[6] == ""


def test_a_config_the_network_does_not_compute_is_one_line_before_any_load(tmp_path, run_cli):
    """A checkpoint directory with config.json alone (no weights, no tokenizer) whose rope_scaling the network
    does not compute: refused by validation, in one line naming the key, exit 2, no output written."""
    reference = Path(__file__).resolve().parents[2] / "dllm_bench" / "models" / "reference_configs"
    raw = json.loads((reference / "llada-8b-instruct" / "config.json").read_text())
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({**raw, "rope_scaling": {"type": "linear", "factor": 2.0}}))
    code, lines = run_cli("model=llada_8b_base", f"model.name_or_path={ckpt}", f"output_dir={tmp_path / 'out'}",
                          "limit=1", "progress=false")
    assert_one_line(code, lines, "model.name_or_path=", "rope_scaling=", "allowed: null")
    assert run_folders(tmp_path / "out") == []
