"""Every code-task row keeps the sandbox's verdict (status and its one-line reason), runs.csv counts them, and a
rendered table notes the counts per cell: a wrong answer and a killed or timed-out program read differently."""

from __future__ import annotations

import pandas as pd

from dllm_bench.report.aggregate import aggregate_runs
from dllm_bench.report.build import CellResult
from dllm_bench.report.render import to_latex, to_markdown
from dllm_bench.report.tables import get_table, table_cells
from dllm_bench.runner.store import schema_order
from dllm_bench.runner.summary import SANDBOX_COLUMNS, SUMMARY_COLUMNS, summarise
from dllm_bench.tasks import get_task
from dllm_bench.tasks.executed import verdict_fields
from dllm_bench.tasks.sandbox import STATUSES


def test_a_code_task_scores_each_verdict_with_its_reason():
    task = get_task("humaneval", timeout_s=1)
    doc = task.docs()[0]
    answers = [doc["canonical_solution"], "    return None\n", "    while True:\n        pass\n",
               "    import os\n    os._exit(0)\n"]
    scores = task.score_many(answers, [doc] * len(answers), workers=4)
    fields = [verdict_fields(s.details) for s in scores]
    assert [f["sandbox_status"] for f in fields] == ["passed", "failed", "timeout", "no_sentinel"]
    assert fields[0]["sandbox_reason"] == "" and fields[1]["sandbox_reason"] == "AssertionError"
    assert fields[2]["sandbox_reason"].startswith("CPU-time limit of 1 s reached")
    assert all(f["isolation"] == "bwrap" and "\n" not in f["sandbox_reason"] for f in fields)


def test_verdict_fields_keep_the_first_line_and_skip_other_tasks():
    details = {"status": "error", "reason": "could not start: [Errno 2] no bwrap\nsecond line", "isolation": "bwrap"}
    assert verdict_fields(details) == {"isolation": "bwrap", "sandbox_status": "error",
                                       "sandbox_reason": "could not start: [Errno 2] no bwrap",
                                       "sandbox_published_passed": None}
    assert verdict_fields({**details, "published_passed": True})["sandbox_published_passed"] is True
    assert verdict_fields({"extracted_answer": "42"}) == {}


def _row(status: str | None, correct: bool) -> dict:
    row = {"correct": correct, "nfe": 4, "steps": 4, "tokens_cut": 8, "tokens_cut_paper": 8, "tokens_all": 8,
           "wall_time_s": 1.0, "latency_s": 1.0}
    return row if status is None else {**row, "sandbox_status": status, "sandbox_reason": ""}


def test_runs_csv_counts_each_verdict_after_the_summary_columns():
    rows = [_row("passed", True), _row("failed", False), _row("timeout", False), _row("killed", False),
            _row("timeout", False)]
    rows[1]["sandbox_published_passed"] = rows[2]["sandbox_published_passed"] = True  # forged passes, counted
    rows[3]["sandbox_published_passed"] = False
    summary = summarise(rows, "cut")
    assert {k: summary[k] for k in SANDBOX_COLUMNS} == {"sandbox_passed": 1, "sandbox_failed": 1, "sandbox_timeout": 2,
                                                       "sandbox_killed": 1, "sandbox_no_sentinel": 0,
                                                       "sandbox_error": 0, "sandbox_published_passed_ours_failed": 2}
    assert not any(k.startswith("sandbox_") for k in summarise([_row(None, True)], "cut"))
    order = schema_order(["sandbox_timeout", "task.name", *SUMMARY_COLUMNS, "run_id", "world_size", "sandbox_passed"])
    assert order.index("sandbox_passed") > order.index(SUMMARY_COLUMNS[-1]) and order[-1] == "world_size"
    assert len(STATUSES) + 1 == len(SANDBOX_COLUMNS)


def test_a_table_notes_the_verdicts_of_each_code_cell():
    spec = get_table("tiny")
    first, second = table_cells(spec)[:2]
    runs = pd.DataFrame([
        {"run_id": "a", "seed": 0, "n_samples": 10, "n_correct": 6, "nfe_total": 40, "tokens_total": 80,
         "wall_time_s_total": 10.0, "sandbox_passed": 6, "sandbox_failed": 3, "sandbox_timeout": 1,
         "sandbox_killed": 0},
        {"run_id": "b", "seed": 1, "n_samples": 10, "n_correct": 5, "nfe_total": 40, "tokens_total": 80,
         "wall_time_s_total": 10.0, "sandbox_passed": 5, "sandbox_failed": 3, "sandbox_timeout": 0,
         "sandbox_killed": 2},
    ])
    code = aggregate_runs(runs)
    assert code.sandbox == (("passed", 11), ("failed", 6), ("timeout", 1), ("killed", 2))
    other = aggregate_runs(runs.drop(columns=[c for c in runs.columns if c.startswith("sandbox_")]))
    assert other.sandbox == ()
    results = [CellResult(first, "ok", code, None, None, {"task": {"scoring": "lm_eval"}}),
               CellResult(second, "ok", other, None, None, {"task": {"scoring": "lm_eval"}})]
    text = to_markdown(spec, results)
    note = "1. " + " / ".join(" ".join(k for k in key if k) for key in (first.row, first.col))
    assert f"{note}: sandbox verdicts over 2 repeats: 11 passed, 6 failed, 1 timeout, 2 killed" in text
    accuracy_line = next(line for line in text.splitlines() if line.startswith("| " + spec.label_row(first.row)))
    assert "[1]" in accuracy_line and "2. " not in text
    assert "sandbox verdicts over 2 repeats" in to_latex(spec, results)
