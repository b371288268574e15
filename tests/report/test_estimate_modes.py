"""`reproduce_table.py --estimate` at batch 1 and in the batched mode, from measured speed-up files; the mode's flags."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dllm_bench.report.estimate import batched_cell_hours, cell_docs, cell_gpu_hours, read_speedups
from dllm_bench.report.tables import get_table, table_cells


def write_speedups(folder: Path, name: str, rows: list[tuple[str, int, float]]) -> Path:
    """A speed-up CSV as scripts/gpu_check.py (gpu_generate_*.csv) or scripts/bench_batch.py writes one."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    pd.DataFrame([dict(shape=s, batch=b, prompt=512, answer=256, tokens_per_s=t) for s, b, t in rows]).to_csv(
        path, index=False)
    return path


@pytest.fixture()
def gpu_bench(tmp_path: Path) -> Path:
    bench = tmp_path / "bench"
    write_speedups(bench, "gpu_generate_llada-8b.csv", [("llada-8b", 1, 50.0), ("llada-8b", 8, 200.0),
                                                          ("llada-8b", 32, 500.0)])  # x4, x10
    write_speedups(bench, "gpu_generate_dream-7b.csv", [("dream-7b", 1, 40.0), ("dream-7b", 8, 120.0),
                                                          ("dream-7b", 32, 200.0)])  # x3, x5
    return bench


def estimate(load_script, capsys, *argv: str) -> tuple[dict[str, list[str]], list[str]]:
    """(table rows by table name, the lines after the table) of one --estimate call."""
    assert load_script("reproduce_table").main(["--estimate", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:] if line.startswith("| ")]
    rows = {c[0]: c for c in cells}
    memory = next((k for k, line in enumerate(lines) if line.startswith("Memory at batch")), len(lines))
    assert memory < len(lines), "every estimate ends with the memory check"
    return rows, [line for line in lines[:memory] if line and not line.startswith("|")]


def expected(table: str, factor: float, timing_docs: int, limit: int | None = None) -> tuple[float, float]:
    """Batch-1 and batched-mode hours written out: per cell h / speed-up + h x timed share of its documents."""
    single = batched = 0.0
    for cell in table_cells(get_table(table)):
        h = None if cell.unavailable else cell_gpu_hours(cell, limit)
        if h is None:
            continue
        docs = cell_docs(cell, limit)
        single += h
        batched += h / factor + h * min(timing_docs, docs) / docs
    return single, batched


def test_batched_cell_hours_is_the_batched_pass_plus_the_timed_subsample():
    assert batched_cell_hours(10.0, 1000, 5.0, 100) == pytest.approx(10.0 / 5.0 + 10.0 * 100 / 1000)
    assert batched_cell_hours(10.0, 50, 5.0, 100) == pytest.approx(2.0 + 10.0)  # the whole task timed again


def test_both_modes_per_table_from_the_gpu_files(load_script, capsys, gpu_bench):
    rows, after = estimate(load_script, capsys, "--table", "fast_dllm_pp_t4", "--bench-dir", str(gpu_bench))
    single, batched = expected("fast_dllm_pp_t4", 5.0, 100)  # Dream-v0-Base-7B: the dream-7b shape at batch 32
    name, cells, hours, mode, ratio, verdict, needed = [x.strip(" |") for x in rows["fast_dllm_pp_t4"]]
    assert (hours, mode, ratio) == (f"{single:.1f}", f"{batched:.1f}", f"{batched / single:.3f}")
    assert verdict == ("met" if batched / single <= 1 / 3 else "not met")
    assert "batch 32 + batch-1 timing on 100 documents" in capsys_header(load_script, capsys, gpu_bench)
    assert after[0].startswith("Speed-ups at batch 32: measured on the GPU by scripts/gpu_check.py (")
    assert after[0].endswith("dream-7b x5.00, llada-8b x10.00.")


def capsys_header(load_script, capsys, bench: Path) -> str:
    load_script("reproduce_table").main(["--estimate", "--table", "fast_dllm_pp_t4", "--bench-dir", str(bench)])
    return capsys.readouterr().out.splitlines()[0]


def test_batch_size_timing_docs_and_limit_enter_the_arithmetic(load_script, capsys, gpu_bench):
    rows, after = estimate(load_script, capsys, "--all", "--batched", "8", "--timing-docs", "20", "--limit", "50",
                           "--bench-dir", str(gpu_bench))
    for table, factor in (("fast_dllm_pp_t1", 4.0), ("fast_dllm_t2", 3.0)):  # LLaDA x4, Dream x3 at batch 8
        single, batched = expected(table, factor, 20, limit=50)
        assert rows[table][2].strip() == f"{single:.1f}" and rows[table][3].strip() == f"{batched:.1f}"
    assert "runs on the CPU" in rows["tiny"][2]
    total = rows["all GPU tables"]
    assert float(total[3]) / float(total[2]) == pytest.approx(float(total[4]), abs=2e-3)
    assert after[0].startswith("Speed-ups at batch 8: measured on the GPU")
    target = after[1]
    assert target.startswith("Target: every table in the batched mode within 1/3 of its batch-1 GPU hours: ")
    missed = [name for name, row in rows.items() if name not in ("tiny", "all GPU tables")
              and row[5].strip(" |") == "not met"]
    assert target.endswith(f"not met for {', '.join(missed)}.") if missed else "met (highest ratio" in target


def test_target_met_with_a_large_measured_speedup(load_script, capsys, tmp_path):
    bench = tmp_path / "bench"
    write_speedups(bench, "gpu_generate_llada-8b.csv", [("llada-8b", 1, 1.0), ("llada-8b", 64, 1000.0)])
    write_speedups(bench, "gpu_generate_dream-7b.csv", [("dream-7b", 1, 1.0), ("dream-7b", 64, 1000.0)])
    rows, after = estimate(load_script, capsys, "--table", "fast_dllm_t3", "--timing-docs", "10",
                           "--bench-dir", str(bench))
    single, batched = expected("fast_dllm_t3", 1000.0, 10)
    assert rows["fast_dllm_t3"][3].strip() == f"{batched:.1f}" and rows["fast_dllm_t3"][5].strip(" |") == "met"
    assert after[1] == f"Target: every table in the batched mode within 1/3 of its batch-1 GPU hours: met (highest " \
                       f"ratio {batched / single:.3f}, fast_dllm_t3)."


def test_cpu_file_is_the_fallback_and_says_so(load_script, capsys, tmp_path):
    bench = tmp_path / "bench"
    write_speedups(bench, "batch_speedup_cpu.csv", [("tiny-llada", 1, 100.0), ("tiny-llada", 8, 180.0),
                                                    ("tiny-llada", 32, 250.0)])
    speedups = read_speedups(bench)
    assert speedups.source == "cpu" and speedups.by_shape == {"tiny-llada": {1: 1.0, 8: 1.8, 32: 2.5}}
    rows, after = estimate(load_script, capsys, "--table", "fast_dllm_pp_t4", "--bench-dir", str(bench))
    single, batched = expected("fast_dllm_pp_t4", 2.5, 100)  # the one CPU figure for every shape
    assert rows["fast_dllm_pp_t4"][3].strip() == f"{batched:.1f}"
    assert after[0].startswith("Speed-ups at batch 32: measured on the CPU by scripts/bench_batch.py on the tiny "
                               "checkpoint (") and "tiny-llada x2.50" in after[0] and "not the GPU's" in after[0]
    write_speedups(bench, "gpu_generate_dream-7b.csv", [("dream-7b", 1, 40.0), ("dream-7b", 32, 200.0)])
    assert read_speedups(bench).source == "gpu"  # a GPU file wins over the CPU one


def test_without_a_speedup_file_only_batch1_hours(load_script, capsys, tmp_path):
    rows, after = estimate(load_script, capsys, "--table", "fast_dllm_pp_t1", "--bench-dir", str(tmp_path))
    assert rows["fast_dllm_pp_t1"][3].strip() == "no measured speed-up"
    assert after == [f"Batched mode: no measured batch speed-up under {tmp_path} (run `make bench`, i.e. "
                     "scripts/bench_batch.py, or scripts/gpu_check.py on a GPU)."]


def test_an_unmeasured_batch_size_is_one_line_and_exit_2(load_script, capsys, gpu_bench):
    code = load_script("reproduce_table").main(["--estimate", "--all", "--batched", "16", "--bench-dir", str(gpu_bench)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["reproduce_table.py: error: --batched 16 is not allowed: no measured speed-up at batch 16 "
                   "(measured: 1, 8, 32)"]


@pytest.mark.parametrize("argv, message", [
    (["--batched", "1"], "--batched 1 is not allowed: a batch size >= 2 is required"),
    (["--batched", "8", "--timing-docs", "0"], "--timing-docs 0 is not allowed: an integer >= 1 is required"),
    (["--batched", "8", "--timing-docs", "30", "--limit", "20"], "--timing-docs 30 is not allowed: at most --limit 20"),
    (["--timing-docs", "5"], "--timing-docs 5 needs --batched B"),
    (["--batched", "8", "--set", "batch_size=4"], "--set batch_size=... is not allowed with --batched"),
])
def test_bad_mode_flags_are_one_line_and_exit_2(load_script, capsys, argv, message):
    with pytest.raises(SystemExit) as err:
        load_script("reproduce_table").main(["--table", "tiny", *argv])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"reproduce_table.py: error: {message}")


def test_batched_flags_become_every_cells_overrides(load_script, capsys):
    module = load_script("reproduce_table")
    assert module.parse_args(["--table", "tiny", "--batched", "8", "--limit", "20"]).extra == {
        "batch_size": 8, "timing_docs": 20}  # the default 100 documents, at most --limit
    assert module.parse_args(["--table", "tiny", "--batched", "8"]).extra == {"batch_size": 8, "timing_docs": 100}
    assert module.main(["--table", "fast_dllm_pp_t5", "--dry-run", "--batched", "16", "--timing-docs", "50"]) == 0
    commands = capsys.readouterr().out.strip().splitlines()[:-1]
    assert len(commands) == 18 and all("batch_size=16 timing_docs=50" in c for c in commands)


@pytest.mark.slow
def test_tiny_table_in_the_batched_mode(load_script, capsys, tmp_path):
    results, out = tmp_path / "results", tmp_path / "tables"
    assert load_script("reproduce_table").main(["--table", "tiny", "--batched", "4", "--timing-docs", "2",
                                                "--limit", "4", "--results-dir", str(results),
                                                "--out", str(out)]) == 0
    runs = pd.read_csv(results / "tiny_table" / "runs.csv")
    assert len(runs) == 18 and set(runs["batch_size"]) == {4} and set(runs["timing_n_samples"]) == {2}
    assert set(runs["timing_agreement"]) == {1.0}
    text = (out / "tiny.md").read_text()
    tok_lines = [line for line in text.splitlines() if "| Tok/s |" in line]
    assert tok_lines and all(cell.strip(" |").endswith("§") for line in tok_lines for cell in line.split(" | ")[2:])
    assert "Tok/s and speedup timed at batch 1 on the first 2 documents of the cell" in text
    table = pd.read_csv(out / "tiny.csv")
    assert set(table.loc[table["metric"] == "tokens_per_s", "throughput"]) == {"timed"}


def test_the_speedup_needed_for_a_third(load_script, capsys, tmp_path):
    rows, _ = estimate(load_script, capsys, "--all", "--bench-dir", str(tmp_path))  # printed without any file
    for table in ("fast_dllm_pp_t1", "slowfast_t4"):
        single, batched = expected(table, float("inf"), 100)  # an infinite speed-up leaves the timing pass only
        share = batched / single
        assert rows[table][6].strip(" |") == f"x{1 / (1 / 3 - share):.2f}"
    rows, _ = estimate(load_script, capsys, "--table", "fast_dllm_pp_t1", "--timing-docs", "5000",
                       "--bench-dir", str(tmp_path))
    single, batched = expected("fast_dllm_pp_t1", float("inf"), 5000)
    assert rows["fast_dllm_pp_t1"][6].strip(" |") == (f"none: the batch-1 timing pass alone takes "
                                                        f"{batched / single:.2f} of the batch-1 hours")
