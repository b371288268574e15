"""`make demo` end to end at toy size: every method x cache runs, the table, CSVs and a PNG are written."""

from __future__ import annotations

import csv


def test_demo_writes_table_csvs_and_plot(tiny_llada_dir, tmp_path, capsys, load_script):
    demo = load_script("demo")
    assert demo.main(["--limit", "2", "--jobs", "1", "--methods", "sequential,oracle", "--output-dir", str(tmp_path),
                      f"model.name_or_path={tiny_llada_dir}", "warmup=0", "batch_size=2"]) == 0
    out = capsys.readouterr().out
    assert "sequential" in out and "oracle" in out and "tokens_per_s" in out
    with open(tmp_path / "demo" / "demo_table.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 2 * 2
    assert {r["cache"] for r in table} == {"none", "dual"}
    with open(tmp_path / "demo" / "runs.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(table)
    pngs = list((tmp_path / "demo" / "plots").rglob("*.png"))
    assert pngs and all(p.stat().st_size > 0 for p in pngs)
