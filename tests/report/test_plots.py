"""Pareto frontiers, the plotting script, and the confidence-profile analysis."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dllm_bench.report.pareto import (
    frontier_figure,
    pareto_front,
    plot_frontiers,
    published_points,
    run_points,
)
from dllm_bench.report.profile import analyse_profiles, plot_profile, profile_markdown, read_trace_steps
from dllm_bench.report.published import load_published
from dllm_bench.report.runs import read_runs

DEMO = Path(__file__).parent / "fixtures" / "demo" / "runs.csv"


def test_pareto_front_keeps_only_non_dominated_points():
    x = np.array([1.0, 2.0, 3.0, 2.5, 4.0])
    y = np.array([90.0, 85.0, 80.0, 79.0, 80.0])
    assert pareto_front(x, y, larger_x_better=True).tolist() == [4, 1, 0]   # (3, 80) and (2.5, 79) dominated
    assert pareto_front(x, y, larger_x_better=False).tolist() == [0]        # smallest x also most accurate


def test_run_points_label_each_rule_parameter():
    points = run_points(read_runs([DEMO]))
    labels = dict(zip(points["method"] + points["label"], points["label"]))
    assert {"thresholdτ=0.9", "thresholdτ=0.7", "factorf=0.75", "frechetδ=0.25", "frechetδ=0.1"} <= set(labels)
    assert points.loc[points["method"] == "oracle", "accuracy"].item() == pytest.approx(100.0)


def test_published_points_take_tok_per_nfe_from_the_note():
    rows = [r for r in load_published() if r["paper"] == "fast-dllm-pp" and r["table"] == "Table 1"]
    first = published_points(rows)[0]
    assert first.tokens_per_forward == pytest.approx(2.88)
    assert first.nfe_mean == pytest.approx(107135 / 1319)


def test_plot_script_writes_png_and_pdf_from_demo_csv(tmp_path, load_script):
    module = load_script("plot_pareto")
    assert module.main(["--runs", str(DEMO), "--out-dir", str(tmp_path), "--published", "fast_dllm_pp_t1",
                        "--published-where", "task=gsm8k", "gen_length=256"]) == 0
    png, pdf = tmp_path / "demo_pareto.png", tmp_path / "demo_pareto.pdf"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 5_000


def _traces(path: Path) -> Path:
    profiles = [
        ([0.999, 0.999, 0.999, 0.8], 4),   # heterogeneous: Fréchet 4, factor 3, threshold 3
        ([0.99, 0.99, 0.6, 0.5], 2),       # all three commit 2
        ([0.9, 0.9, 0.9, 0.9], 4),         # equal confidences: Fréchet = factor (f = 1 - delta)
        ([0.5, 0.4], 1),                   # nobody passes: everyone commits the top one
    ]
    with path.open("w") as f:
        f.write(json.dumps({"sample_id": "s0", "doc_index": 0, "steps": [
            {"step": i, "sorted_confidences": c, "n_committed": k, "frechet_core": None, "frechet_bonus": None}
            for i, (c, k) in enumerate(profiles)]}) + "\n")
    return path


def test_profile_analysis_on_known_profiles(tmp_path):
    analysis = analyse_profiles(read_trace_steps([_traces(tmp_path / "traces.jsonl")]), tau=0.9, f=0.75, delta=0.25)
    assert analysis.commits["frechet"].tolist() == [4, 2, 4, 1]
    assert analysis.commits["factor"].tolist() == [3, 2, 4, 1]
    assert analysis.commits["threshold"].tolist() == [3, 2, 4, 1]
    dec = analysis.decomposition
    assert dec["core"][0] == pytest.approx(0.0) and dec["bonus"][0] == pytest.approx(3 * 0.199)
    assert dec["bonus"][2] == pytest.approx(0.0)
    row = analysis.comparison.set_index(["rule", "versus"]).loc[("frechet", "factor")]
    assert (row["more"], row["equal"], row["fewer"]) == (0.25, 0.75, 0.0)
    assert "| 4 | 2 | 1 | 1 | 2 |" in profile_markdown(analysis)
    png, pdf = plot_profile(analysis, tmp_path / "profile")
    assert png.stat().st_size > 10_000 and pdf.stat().st_size > 5_000


def test_profile_without_traced_steps_says_how_to_get_them():
    with pytest.raises(ValueError, match="trace=true"):
        analyse_profiles([])


def test_frontier_figure_legend_error_bars_and_labels():
    import matplotlib.pyplot as plt

    runs = read_runs([DEMO])
    runs.loc[runs["run_id"] == "blocks-frechet-none-f", ["n_samples", "n_correct"]] = ["50", "44"]  # fewer documents
    points = run_points(runs)
    assert points["ci_low"].notna().all() and (points["ci_low"] <= points["accuracy"]).all()
    fig = frontier_figure(points, title="demo")
    try:
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert len(legend) == len(set(legend))                      # one entry per distinct series
        assert legend.count("oracle: a bound (reference decode untimed), not a method") == 1
        assert {"no cache", "cache dual"} <= set(legend) and "faint: n < 200 (n in label)" in legend
        assert "n = 50–200 documents per run" in fig._suptitle.get_text()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            assert len(ax.collections) > len(points)                    # points plus their error bars
            boxes = [t.get_window_extent(renderer) for t in ax.texts]
            assert any("n=50" in t.get_text() for t in ax.texts)
            assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    finally:
        plt.close(fig)


def test_tokens_per_s_panel_marks_runs_timed_on_a_loaded_machine():
    import matplotlib.pyplot as plt

    runs = read_runs([DEMO])
    runs["machine_loaded"] = ["True"] + ["False"] * (len(runs) - 1)
    fig = frontier_figure(run_points(runs))
    try:
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert "hollow (tok/s): timed on a loaded machine, off the front" in legend
        from matplotlib.collections import PathCollection

        markers = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]
        hollow = [c for c in markers if len(c.get_facecolors()) == 0]
        assert len(hollow) == 1
    finally:
        plt.close(fig)


def test_table_and_plot_builders_rewrite_identical_bytes(tmp_path, t5_results):
    from dllm_bench.report.build import resolve_table
    from dllm_bench.report.render import write_table
    from dllm_bench.report.tables import get_table

    spec = get_table("fast_dllm_pp_t5")
    analysis = analyse_profiles(read_trace_steps([_traces(tmp_path / "traces.jsonl")]))
    snapshots = []
    for attempt in ("first", "second"):
        out = tmp_path / attempt
        results = resolve_table(spec, read_runs([t5_results / "fast_dllm_pp_t5" / "runs.csv"]))
        paths = [*write_table(spec, results, out).values(),
                 *plot_frontiers(run_points(read_runs([DEMO])), out / "demo_pareto", title="demo"),
                 *plot_profile(analysis, out / "profile")]
        snapshots.append({p.name: p.read_bytes() for p in paths})
    assert snapshots[0].keys() == snapshots[1].keys() and len(snapshots[0]) == 7
    assert snapshots[0] == snapshots[1]
    assert b"CreationDate" not in snapshots[0]["demo_pareto.pdf"]
