"""Registry, config validation, selection/sharding, data errors that name file, row and field, chat rendering."""

from __future__ import annotations

import json

import pytest

from dllm_bench.tasks import TASKS, Score, get_task, render_prompt
from dllm_bench.tasks.data import DataError

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


def test_registry_lists_every_benchmark_and_rejects_unknown_names():
    assert {"gsm8k", "gsm8k_cot", "minerva_math", "minerva_math500", "humaneval", "mbpp", "gpqa_main",
            "gpqa_diamond", "mathvista", "mathverse", "sudoku"} <= set(TASKS)
    with pytest.raises(KeyError, match="unknown task 'gsm9k'.*gsm8k.*mbpp"):
        get_task("gsm9k")


def test_every_registered_task_has_its_conf_file_and_each_conf_file_a_task():
    from dllm_bench.runner.config import CONF_DIR

    assert {p.stem for p in (CONF_DIR / "task").glob("*.yaml")} == set(TASKS)
    for name, cls in TASKS.items():
        assert cls.name == name and get_task(name, limit=1).name == name


def test_a_task_registered_at_runtime_is_built_by_name():
    from dllm_bench.tasks.base import Task, register

    try:
        @register
        class Echo(Task):
            """A task whose gold is its prompt."""

            name = "echo_test_task"

        assert get_task("echo_test_task", limit=2).config.limit == 2
        with pytest.raises(TypeError, match="registered twice"):
            register(type("Echo2", (Task,), {"name": "echo_test_task"}))
    finally:
        TASKS.pop("echo_test_task", None)
    assert "echo_test_task" not in TASKS


@pytest.mark.parametrize("cfg, message", [
    ({"limit": -1}, "limit=-1"), ({"offset": -2}, "offset=-2"), ({"num_fewshot": -1}, "num_fewshot=-1"),
    ({"rank": 2, "world_size": 2}, "rank=2"), ({"world_size": 0}, "world_size=0"),
    ({"data_files": "a", "data_dir": "b"}, "not both"),
])
def test_bad_config_is_refused_before_loading(cfg, message):
    with pytest.raises(ValueError, match=message):
        get_task("gsm8k", **cfg)


def test_unknown_config_key_is_refused():
    with pytest.raises(TypeError, match="shots"):
        get_task("gsm8k", shots=3)


def test_limit_offset_and_rank_sharding_partition_the_docs(fixtures_dir):
    d = str(fixtures_dir / "gsm8k")
    ids = [doc["sample_id"] for doc in get_task("gsm8k", data_dir=d).docs()]
    assert len(ids) == 30 and len(set(ids)) == 30
    window = [doc["sample_id"] for doc in get_task("gsm8k", data_dir=d, offset=5, limit=10).docs()]
    assert window == ids[5:15]
    shards = [[doc["sample_id"] for doc in get_task("gsm8k", data_dir=d, offset=5, limit=10, rank=r,
                                                   world_size=3).docs()] for r in range(3)]
    assert sorted(sum(shards, [])) == sorted(window) and shards[1] == window[1::3]


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(DataError, match="data file not found: .*nope.jsonl"):
        get_task("gsm8k", data_files=str(tmp_path / "nope.jsonl")).docs()
    with pytest.raises(DataError, match="none of math500_test.jsonl"):
        get_task("minerva_math500", data_dir=str(tmp_path)).docs()


def test_malformed_rows_name_file_row_and_field(tmp_path):
    bad = tmp_path / "test.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n" + json.dumps({"question": "q2"}) + "\n")
    with pytest.raises(DataError, match=r"test.jsonl: line 2 \(row 1\) has no field 'answer'"):
        get_task("gsm8k", data_files=str(bad)).docs()
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "q", "answer": "1"}\n{"question": \n')
    with pytest.raises(DataError, match=r"broken.jsonl: line 2 is not valid JSON"):
        get_task("gsm8k", data_files=str(broken)).docs()
    mbpp = tmp_path / "mbpp.jsonl"
    mbpp.write_text(json.dumps({"task_id": 11, "text": "t", "code": "c", "test_list": ["assert 1"]}) + "\n")
    with pytest.raises(DataError, match=r"mbpp.jsonl: line 1 \(row 0\) field 'test_list' is \['assert 1'\] \(list\); "
                                        r"allowed: a list of at least 3 strings"):
        get_task("mbpp", data_files=str(mbpp)).docs()
    gpqa = tmp_path / "gpqa.csv"
    gpqa.write_text("Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2\nq,a,b,c\n")
    with pytest.raises(DataError, match=r"gpqa.csv: line 2 \(row 0\) has no field 'Incorrect Answer 3'"):
        get_task("gpqa_main", data_files=str(gpqa)).docs()


def test_every_task_scores_to_a_score_object(fixtures_dir):
    task = get_task("gsm8k", data_dir=str(fixtures_dir / "gsm8k"), limit=1)
    score = task.score("#### 18", task.docs()[0])
    assert isinstance(score, Score) and score.correct and score.extracted == "18"


def test_render_prompt_plain_and_chat(tiny_llada_dir, fixtures_dir):
    from dllm_bench.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_llada_dir)
    task = get_task("gsm8k", data_dir=str(fixtures_dir / "gsm8k"), limit=1)
    doc = task.docs()[0]
    assert render_prompt(task, doc, tokenizer, chat=False) == task.prompt(doc)
    chat = render_prompt(task, doc, tokenizer, chat=True)
    expected = tokenizer.apply_chat_template([{"role": "user", "content": task.prompt(doc)}],
                                             add_generation_prompt=True, tokenize=False)
    assert chat == expected and task.prompt(doc) in chat and chat != task.prompt(doc)
