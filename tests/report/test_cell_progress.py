"""Multi-cell commands: each cell's result as it ends, with the cells left and their ETA; the dry run says which
cells this machine cannot run and why."""

from __future__ import annotations

import pytest

from dllm_bench.runner.progress import CellProgress, duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("seconds", "text"), [(0, "0 s"), (59.4, "59 s"), (60, "1 min 00 s"), (200, "3 min 20 s"),
                                               (3600 + 5 * 60, "1 h 05 min")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_eta_is_the_mean_pace_times_the_cells_left_over_every_group():
    clock = FakeClock()
    progress = CellProgress(clock)
    progress.plan("a", 2)
    progress.plan("b", 2)
    assert progress.eta() == "4 left"
    assert progress.start() == "[1/4]"
    clock.now += 10
    assert progress.finish("a r1 | c1", "accuracy 0.5000") == "[1/4] a r1 | c1: accuracy 0.5000 in 10 s; 3 left, ETA 30 s"
    progress.start()
    clock.now += 30
    assert progress.finish("a r2 | c1", None) == ("[2/4] a r2 | c1: failed, the cell stays missing in 30 s; 2 left, "
                                                  "ETA 40 s")
    progress.plan("b", 1)  # b re-resolved at its turn: one of its cells was filled meanwhile
    progress.start()
    clock.now += 60
    assert progress.finish("b r1 | c1", "ok").endswith("in 1 min 00 s; none left")
    assert (progress.done, progress.failed, progress.total) == (3, 1, 3)


def test_a_table_run_prints_each_cells_result_and_the_eta(tmp_path, t5_results, load_script, capsys, monkeypatch):
    module = load_script("reproduce_table")
    monkeypatch.setattr(module, "cuda_available", lambda: True)
    ran = []

    def fake_run(spec, result, results_dir, limit, position=""):
        ran.append(position)
        return None if len(ran) == 2 else f"accuracy 0.{len(ran)}000"

    monkeypatch.setattr(module, "run_cell", fake_run)
    out = tmp_path / "tables"
    assert module.main(["--table", "fast_dllm_pp_t5", "--results-dir", str(t5_results), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert ran == [f"[{k}/15]" for k in range(1, 16)]
    cells = [line for line in lines if line.startswith("[") and "/15] fast_dllm_pp_t5 " in line]
    assert len(cells) == 15
    assert cells[0].startswith("[1/15] fast_dllm_pp_t5 ") and ": accuracy 0.1000 in " in cells[0]
    assert cells[0].endswith("14 left, ETA 0 s") and "failed, the cell stays missing" in cells[1]
    assert cells[-1].endswith("none left")
    assert lines[0] == "[fast_dllm_pp_t5] running 15 missing cell(s); 15 left in all"


@pytest.mark.parametrize(("gpu", "summary"), [
    (False, "15 missing: 0 runnable here, 15 not runnable here (needs a GPU: no CUDA device here; --gpu runs it "
            "anyway); 0 unavailable"),
    (True, "15 missing: 15 runnable here, 0 not runnable here; 0 unavailable"),
])
def test_the_dry_run_says_which_cells_this_machine_cannot_run(t5_results, load_script, capsys, monkeypatch, gpu,
                                                              summary):
    module = load_script("reproduce_table")
    monkeypatch.setattr(module, "cuda_available", lambda: gpu)
    assert module.main(["--table", "fast_dllm_pp_t5", "--dry-run", "--results-dir", str(t5_results)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"[fast_dllm_pp_t5] 3 of 18 cells filled, {summary}"
    why = "runnable here" if gpu else "needs a GPU: no CUDA device here"
    assert all(line.startswith(f"[fast_dllm_pp_t5] missing, {why}") for line in lines[:-1])


def test_unavailable_cells_say_why(load_script, capsys, tmp_path):
    module = load_script("reproduce_table")
    assert module.main(["--table", "slowfast_t4", "--dry-run", "--results-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    unavailable = [line for line in lines if line.startswith("[slowfast_t4] unavailable, ")]
    assert unavailable and all(len(line) > len("[slowfast_t4] unavailable, ") + 10 for line in unavailable)
    assert lines[-1].endswith(f"; {len(unavailable)} unavailable")

