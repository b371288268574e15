"""notebooks/frontiers.ipynb runs headlessly on a results folder (demo-like runs, tiny-table runs, traces)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from .conftest import summary, write_runs

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "frontiers.ipynb"
DEMO = Path(__file__).parent / "fixtures" / "demo" / "runs.csv"


def test_notebook_imports_only_the_public_api():
    """The notebook is what a user writes: ``dllm_bench`` (its API) and the documented ``dllm_bench.decoding``."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    modules = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                modules.add(node.module)
    ours = {m for m in modules if m.split(".")[0] == "dllm_bench"}
    assert ours == {"dllm_bench", "dllm_bench.decoding"}, ours


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
    for run in ("blocks-frechet-none-e", "blocks-topk-none-a"):
        (results / "demo" / run).mkdir()
        (results / "demo" / run / "traces.jsonl").write_text(json.dumps(trace) + "\n")
    write_runs(results / "tiny_table" / "runs.csv", "tiny", [
        (("Fréchet delta=0.25", "No cache"), {}, summary(200, 183, 1420, 3400, 3.15)),
        (("Factor f=0.75", "No cache"), {}, summary(200, 181, 1560, 3400, 3.43)),
    ])
    monkeypatch.setenv("DLLM_BENCH_RESULTS", str(results))
    monkeypatch.delenv("DLLM_BENCH_PLOTS", raising=False)
    before = _porcelain()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel inherits this process's environment (DLLM_BENCH_* above)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = _outputs_text(nb)
    assert "10 runs in 2 runs.csv file(s)" in text
    assert "Embedded tiny LLaDA on 4x4 Sudoku" in text and "91.5 [" in text
    assert "tok_per_forward_ratio" in text
    # its own evaluation (8 puzzles of the embedded tiny LLaDA) and one prompt decoded through generate
    assert "over 8 puzzles" in text and "forwards per answer" in text
    assert (results / "notebook" / "runs" / "default" / "runs.csv").is_file()
    assert re.search(r"decoded '[^']+' in \d+ forwards", text)
    # one analysis per traced rule and parameter, each headed by its own setting
    assert "Confidence profiles of frechet δ=0.25: 1 traced run(s)" in text
    assert "Confidence profiles of topk: 1 traced run(s)" in text
    assert (results / "notebook" / "demo_pareto.png").stat().st_size > 10_000
    assert (results / "notebook" / "tiny_table_pareto.png").stat().st_size > 10_000
    assert _porcelain() == before


def _porcelain() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout


def test_notebook_on_the_repository_results_leaves_the_tree_clean(monkeypatch):
    """As shipped (no environment): reads results/, writes its figures to the ignored results/notebook/."""
    monkeypatch.delenv("DLLM_BENCH_RESULTS", raising=False)
    monkeypatch.delenv("DLLM_BENCH_PLOTS", raising=False)
    before = _porcelain()
    figures = REPO / "results" / "notebook"
    existed = figures.exists()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
        assert "Confidence profiles of frechet δ=0.25: 3 traced run(s)" in _outputs_text(nb)
        assert (figures / "tiny_table_pareto.png").is_file()
        assert _porcelain() == before
    finally:
        if not existed:
            shutil.rmtree(figures, ignore_errors=True)
