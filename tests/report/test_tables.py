"""Table builder: golden Markdown on a fixture with known values; missing runs reported, never filled."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
import pytest

from dllm_bench.report.build import resolve_table
from dllm_bench.report.published import load_published
from dllm_bench.report.render import long_rows, to_latex, to_markdown
from dllm_bench.report.runs import read_runs
from dllm_bench.report.tables import METRIC_LABELS, TABLES, get_table, published_path, table_cells

GOLDEN = Path(__file__).parent / "golden" / "fast_dllm_pp_t5.md"


def test_every_published_row_is_a_cell_of_exactly_one_table():
    papers = [spec for spec in TABLES.values() if spec.paper]
    for path in {published_path(spec) for spec in papers}:
        rows = load_published(path)
        covered = [id(c.published) for spec in papers if published_path(spec) == path
                   for c in table_cells(spec, rows) if c.published is not None]
        assert len(covered) == len(rows) == len(set(covered)), path


def test_fixture_runs_give_the_known_pooled_numbers(t5_resolved):
    results = t5_resolved
    single = results[("5-shot, No cache", "Threshold")].aggregate
    assert single.n_samples == 300 and single.n_repeats == 1
    assert single.accuracy == pytest.approx(100 * 235 / 300)
    assert single.tokens_per_s == pytest.approx(28.0)
    seeds = results[("5-shot, PrefixCache", "Fréchet")].aggregate
    assert seeds.n_repeats == 2 and seeds.n_samples == 300
    assert seeds.accuracy == pytest.approx(100 * 470 / 600)
    assert seeds.tokens_per_s == pytest.approx(32.0)
    assert seeds.tokens_per_s_sd == pytest.approx(math.sqrt(8.0))
    shards = results[("8-shot, DualCache", "Factor")].aggregate
    assert shards.n_repeats == 1 and shards.n_samples == 300
    assert shards.accuracy == pytest.approx(100 * 230 / 300)
    assert shards.tokens_per_s == pytest.approx(30500 / 820)
    assert shards.nfe_total == pytest.approx(8100)


def test_a_run_with_other_settings_never_fills_a_cell(t5_resolved):
    results = t5_resolved
    cell = results[("5-shot, No cache", "Fréchet")]  # only a delta=0.3 run exists
    assert cell.status == "missing" and cell.aggregate is None
    assert "rule=frechet rule.delta=0.25" in cell.command
    assert sum(r.status == "ok" for r in results.values()) == 3


def test_markdown_matches_golden_file(t5_results, tmp_path, load_script):
    out = tmp_path / "tables"
    assert load_script("reproduce_table").main(["--table", "fast_dllm_pp_t5", "--results-dir", str(t5_results), "--out", str(out),
                           "--no-run"]) == 0
    text = (out / "fast_dllm_pp_t5.md").read_text(encoding="utf-8")
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")
    assert (out / "fast_dllm_pp_t5.tex").read_text().startswith("% Fast-dLLM++ Table 5")
    long = pd.read_csv(out / "fast_dllm_pp_t5.csv")
    acc = long[(long.row == "5-shot, No cache") & (long.column == "Threshold") & (long.metric == "accuracy")].iloc[0]
    assert acc.published == pytest.approx(78.33) and acc.reproduced == pytest.approx(78.333333, abs=1e-5)
    assert acc.ci_low < acc.reproduced < acc.ci_high


@pytest.mark.parametrize("name", ["slowfast_t3", "slowfast_t4"])
def test_with_no_runs_every_published_number_shows_and_every_cell_is_missing(name):
    spec = get_table(name)
    results = resolve_table(spec, pd.DataFrame())
    assert results and all(r.status in ("missing", "unavailable") and r.aggregate is None for r in results)
    text = to_markdown(spec, results)
    for r in results:
        if r.cell.published is not None:  # the code-preset companions have no published number of their own
            assert f"{r.cell.published['accuracy']} / " in text
        if r.command:
            assert f"`{r.command}`" in text
    assert f"Cells with runs: 0 of {len(results)}." in text
    assert "\\begin{tabular}" in to_latex(spec, results)


def test_unknown_table_names_the_choices():
    with pytest.raises(ValueError, match="table='t9' is unknown; choose one of fast_dllm_pp_t1"):
        get_table("t9")


def test_tiny_table_marks_cells_on_fewer_documents_and_loaded_timing(tmp_path, load_script):
    from .conftest import summary, write_runs

    results = tmp_path / "results"
    write_runs(results / "tiny_table" / "runs.csv", "tiny", [
        (("Fréchet delta=0.25", "No cache"), {}, {**summary(50, 46, 350, 1000, 0.5), "machine_loaded": "True"}),
        (("Sequential (top-1 per step)", "No cache"), {}, {**summary(500, 490, 12000, 12000, 10.0), "machine_loaded": "False"}),
    ])
    spec = get_table("tiny")
    resolved = {r.cell.row[0] + "/" + r.cell.col[0]: r for r in resolve_table(spec, read_runs([
        results / "tiny_table" / "runs.csv"]))}
    frechet, sequential = resolved["Fréchet delta=0.25/No cache"], resolved["Sequential (top-1 per step)/No cache"]
    assert frechet.partial and frechet.full_size == 500  # the task's size
    assert not sequential.partial
    text = to_markdown(spec, list(resolved.values()))
    frechet_acc = next(line for line in text.splitlines() if line.startswith("| Fréchet"))
    assert "92.0 [" in frechet_acc and "n=50†" in frechet_acc
    lines = text.splitlines()
    tok_s = lines[lines.index(frechet_acc) + 1]
    assert "—‡†" in tok_s and "2000.0" not in tok_s  # a loaded machine's speed is left out of the comparison
    kept = [row for row in long_rows(spec, list(resolved.values()))
            if row["row"] == "Fréchet delta=0.25" and row["column"] == "No cache" and row["metric"] == "tokens_per_s"]
    assert kept[0]["loaded"] is True and float(kept[0]["reproduced"]) == pytest.approx(2000.0)  # the CSV keeps it
    sequential = next(line for line in lines if line.startswith("| Sequential"))
    assert "98.0 [" in sequential and "†" not in sequential
    assert "† fewer documents than the task has" in text and "—‡ = timed on a loaded machine" in text
    assert r"$^\ddagger$" in to_latex(spec, list(resolved.values()))


def test_dry_run_says_all_filled_and_keeps_the_results_folder(tmp_path, t5_results, load_script, capsys,
                                                              monkeypatch):
    module = load_script("reproduce_table")
    monkeypatch.setattr(module, "cuda_available", lambda: False)  # a CPU machine: the GPU cells cannot run here
    assert module.main(["--table", "tiny", "--dry-run"]) == 0  # the committed tiny runs fill every cell
    assert capsys.readouterr().out.strip().splitlines()[-1] == "[tiny] all 18 cells filled"
    assert module.main(["--table", "fast_dllm_pp_t5", "--dry-run", "--results-dir", str(t5_results),
                        "--limit", "20"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == ("[fast_dllm_pp_t5] 3 of 18 cells filled, 15 missing: 0 runnable here, 15 not runnable "
                         "here (needs a GPU: no CUDA device here; --gpu runs it anyway); 0 unavailable")
    commands = lines[:-1]
    assert len(commands) == 15
    for line in commands:
        assert line.startswith("[fast_dllm_pp_t5] missing, needs a GPU: no CUDA device here")
        assert f"output_dir={t5_results} limit=20" in line
        assert line.endswith("# offline: add task.data_dir=<folder with gsm8k's files>")


def test_estimate_honours_limit_and_lists_the_tiny_table(load_script, capsys):
    module = load_script("reproduce_table")
    table_rows = lambda out: {line.split(" | ")[0][2:]: line for line in out.splitlines()[2:]  # noqa: E731
                              if line.startswith("| ")}
    module.main(["--all", "--estimate"])
    full = table_rows(capsys.readouterr().out)
    module.main(["--all", "--estimate", "--limit", "10"])
    limited = table_rows(capsys.readouterr().out)
    assert "runs on the CPU" in full["tiny"] and "runs on the CPU" in limited["tiny"]
    hours = lambda line: float(line.split(" | ")[2].split()[0])  # noqa: E731
    # HumanEval has 164 documents: 10 of them take 10/164 of the time of the whole table's HumanEval cells
    estimated = [name for name in full if full[name].split(" | ")[2][:1].isdigit()]  # not CPU-run, not unprinted
    # the field table is estimated from the cells whose rows print a throughput (D2F's, Fast-dLLM v2's)
    assert "fast_dllm_t1" in estimated and "field" in estimated and "(+" in full["field"]
    assert all(hours(limited[name]) < hours(full[name]) for name in estimated)


def test_unknown_table_is_one_line_and_exit_2(load_script, capsys):
    with pytest.raises(SystemExit) as err:
        load_script("reproduce_table").main(["--table", "bogus"])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reproduce_table.py: error: table='bogus' is unknown")


def test_methods_layout_puts_a_line_per_method_and_column(tmp_path):
    import dataclasses

    from .conftest import summary, write_runs

    results = tmp_path / "results"
    write_runs(results / "tiny_table" / "runs.csv", "tiny", [
        (("Fréchet delta=0.25", "No cache"), {}, {**summary(500, 460, 3500, 10000, 5.0), "machine_loaded": "True"}),
        (("Sequential (top-1 per step)", "No cache"), {}, {**summary(500, 470, 3500, 10000, 4.0),
                                                            "machine_loaded": "False"}),
    ])
    spec = dataclasses.replace(get_table("tiny"), layout="methods", col_header="Cache")
    resolved = resolve_table(spec, read_runs([results / "tiny_table" / "runs.csv"]))
    lines = to_markdown(spec, resolved).splitlines()
    header = next(line for line in lines if line.startswith("| Rule |"))
    assert header == "| Rule | Cache | " + " | ".join(METRIC_LABELS[m] for m in spec.metrics) + " |"
    frechet = [line for line in lines if line.startswith("| Fréchet delta=0.25 |")]
    assert len(frechet) == 1 and "| No cache | 92.0 [" in frechet[0] and "—‡" in frechet[0]  # loaded: no speed
    assert next(line for line in lines if line.startswith("|  | PrefixCache |"))  # the row's next column, own line
    sequential = next(line for line in lines if line.startswith("| Sequential (top-1 per step) | No cache |"))
    assert "94.0 [" in sequential and "2500.0" in sequential and "‡" not in sequential  # 10000 tokens / 4 s
    tex = to_latex(spec, resolved)
    assert "\\begin{tabular}{" + "l" * (2 + len(spec.metrics)) + "}" in tex


def test_an_unknown_layout_is_refused(tmp_path):
    from dllm_bench.report.tables import load_table

    path = tmp_path / "t.yaml"
    path.write_text("title: t\npreset: tiny\nmetrics: [accuracy]\nlayout: sideways\ncells: []\n", encoding="utf-8")
    with pytest.raises(ValueError, match="layout 'sideways'; allowed: grid, methods"):
        load_table(path)
