"""`dllm-bench --multirun`: each job's result as it ends, the jobs left and their ETA (runner/sweep_progress.py)."""

from __future__ import annotations

import re
import sys


def test_a_multirun_prints_each_jobs_result_and_the_eta(monkeypatch, llada_overrides, tmp_path, capsys):
    from hydra.core.global_hydra import GlobalHydra

    from dllm_bench.run import app

    monkeypatch.setattr(sys, "argv", ["dllm-bench", "--multirun", *llada_overrides, "name=sweep", "limit=2",
                                      "batch_size=2", "warmup=0", "cache=none,prefix", "rule.threshold=0.8,0.9"])
    try:
        app()
    finally:
        GlobalHydra.instance().clear()
    lines = [line for line in capsys.readouterr().out.splitlines() if re.match(r"\[\d+/\d+\] ", line)]
    assert [line.split(" ", 1)[0] for line in lines] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    assert lines[0].startswith("[1/4] cache=none rule.threshold=0.8: accuracy ") and "; 3 left, ETA " in lines[0]
    assert lines[1].endswith(" s") and "; 2 left, ETA " in lines[1]
    assert lines[3].startswith("[4/4] cache=prefix rule.threshold=0.9: ") and lines[3].endswith("none left")


def test_a_single_run_prints_no_sweep_line(monkeypatch, llada_overrides, capsys):
    from hydra.core.global_hydra import GlobalHydra

    from dllm_bench.run import app

    monkeypatch.setattr(sys, "argv", ["dllm-bench", *llada_overrides, "name=single", "limit=2", "warmup=0"])
    try:
        app()
    finally:
        GlobalHydra.instance().clear()
    assert not [line for line in capsys.readouterr().out.splitlines() if re.match(r"\[\d+/\d+\] ", line)]
