"""`make demo` end to end at toy size: every method x cache runs, the table, CSVs and a PNG are written."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_demo_writes_table_csvs_and_plot(tiny_llada_dir, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("demo_script", REPO / "scripts" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
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
