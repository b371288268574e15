"""notebooks/frontiers.ipynb runs headlessly on a results folder (demo-like runs, tiny-table runs, traces)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from .conftest import summary, write_runs

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "frontiers.ipynb"
DEMO = Path(__file__).parent / "fixtures" / "demo" / "runs.csv"


def _outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.extend(str(v) for v in out.get("data", {}).values())
    return "\n".join(parts)


def test_notebook_executes_on_results(tmp_path, monkeypatch):
    results = tmp_path / "results"
    (results / "demo").mkdir(parents=True)
    shutil.copy(DEMO, results / "demo" / "runs.csv")
    trace = {"sample_id": "s0", "doc_index": 0, "steps": [
        {"step": 0, "sorted_confidences": [0.999, 0.999, 0.999, 0.8], "n_committed": 4},
        {"step": 1, "sorted_confidences": [0.9, 0.5], "n_committed": 1}]}
    (results / "demo" / "frechet-none-e").mkdir()
    (results / "demo" / "frechet-none-e" / "traces.jsonl").write_text(json.dumps(trace) + "\n")
    write_runs(results / "tiny_table" / "runs.csv", "tiny", [
        (("Fréchet delta=0.25", "No cache"), {}, summary(200, 183, 1420, 3400, 3.15)),
        (("Factor f=0.75", "No cache"), {}, summary(200, 181, 1560, 3400, 3.43)),
    ])
    monkeypatch.setenv("DLLM_BENCH_RESULTS", str(results))
    monkeypatch.setenv("DLLM_BENCH_PLOTS", str(tmp_path / "plots"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel inherits this process's environment (DLLM_BENCH_* above)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = _outputs_text(nb)
    assert "10 runs in 2 runs.csv file(s)" in text
    assert "Embedded tiny LLaDA on 4x4 Sudoku" in text and "91.5 [" in text
    assert "tok_per_forward_ratio" in text
    assert "Confidence profiles" in text
    assert (tmp_path / "plots" / "demo_pareto.png").stat().st_size > 10_000
    assert (tmp_path / "plots" / "tiny_table_pareto.png").stat().st_size > 10_000
