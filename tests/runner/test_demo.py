"""`make demo` end to end at toy size: every method x cache runs, the table, CSVs and a PNG are written."""

from __future__ import annotations

import csv
import sys


def _csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_demo_writes_table_csvs_and_plot(tiny_llada_dir, tmp_path, capsys, load_script):
    demo = load_script("demo")
    assert demo.main(["--limit", "2", "--jobs", "1", "--methods", "sequential,oracle", "--output-dir", str(tmp_path),
                      f"model.name_or_path={tiny_llada_dir}", "warmup=0", "batch_size=2"]) == 0
    out = capsys.readouterr().out
    assert "sequential" in out and "oracle" in out and "tokens_per_s" in out
    assert "tokens_per_s, latency_s_mean: the sweep itself (one run at a time)" in out
    table = _csv(tmp_path / "demo" / "demo_table.csv")
    assert len(table) == 2 * 2
    assert {r["cache"] for r in table} == {"none", "dual"}
    assert all("/" in r["load"] for r in table)
    assert len(_csv(tmp_path / "demo" / "runs.csv")) == len(table)
    assert not (tmp_path / "demo" / "timing").exists()
    pngs = list((tmp_path / "demo" / "plots").rglob("*.png"))
    assert pngs and all(p.stat().st_size > 0 for p in pngs)


def test_parallel_demo_takes_its_speed_columns_from_a_sequential_timing_pass(tiny_llada_dir, tmp_path, capsys,
                                                                             load_script, monkeypatch):
    demo = load_script("demo")
    monkeypatch.setitem(sys.modules, demo.__name__, demo)  # worker processes look run_one up by module name
    assert demo.main(["--limit", "3", "--jobs", "2", "--timing-limit", "1", "--methods", "sequential,threshold",
                      "--output-dir", str(tmp_path), f"model.name_or_path={tiny_llada_dir}", "warmup=0",
                      "batch_size=3"]) == 0
    out = capsys.readouterr().out
    assert "tokens_per_s, latency_s_mean: a sequential timing pass (1 problems per setting" in out
    def setting(r: dict) -> tuple:  # the decoding groups' values: the same setting on 3 and on 1 puzzle(s)
        return tuple(sorted((k, v) for k, v in r.items() if k.startswith(("policy.", "rule.", "cache."))))

    sweep = {r["run_id"]: r for r in _csv(tmp_path / "demo" / "runs.csv")}
    timed = {setting(r): r for r in _csv(tmp_path / "demo" / "timing" / "runs.csv")}
    assert {setting(r) for r in sweep.values()} == timed.keys() and len(sweep) == 3 * 2
    assert all(r["n_samples"] == "3" for r in sweep.values()) and all(r["n_samples"] == "1" for r in timed.values())
    for row in _csv(tmp_path / "demo" / "demo_table.csv"):
        run = sweep[row["run_id"]]
        speed = timed[setting(run)]
        assert row["accuracy"] == f"{float(run['accuracy']):.3f}"
        mark = "‡" if speed["machine_loaded"] == "True" else ""
        assert row["tokens_per_s"] == f"{float(speed['tokens_per_s']):.1f}{mark}"
        assert row["load"] == f"{float(speed['load_avg_start']):.2f}/{float(speed['load_avg_end']):.2f}"
