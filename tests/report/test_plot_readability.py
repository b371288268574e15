"""What a reader of each shipped plot relies on: every method and cache in the legend, one marker per cache, labels
that do not overlap and stay in their panel, a title inside the figure, loaded timings apart, no rescore twice."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402

from dllm_bench.decoding.caches import CACHES  # noqa: E402
from dllm_bench.report.frontier import Study  # noqa: E402
from dllm_bench.report.frontier import frontier_figure as search_figure
from dllm_bench.report.pareto import (  # noqa: E402
    cache_markers,
    frontier_figure,
    method_colours,
    plot_title,
    run_points,
)
from dllm_bench.report.runs import read_runs  # noqa: E402
from dllm_bench.runner.summary import wilson_interval  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEMO = Path(__file__).parent / "fixtures" / "demo" / "runs.csv"
SHIPPED = {"tiny": ROOT / "results" / "tiny_table" / "runs.csv", "field_tiny": ROOT / "results" / "field_tiny" / "runs.csv"}
LONG_TITLE = ("The field's decoders and caches on the embedded tiny LLaDA and Dream, 4x4 Sudoku (gen 24, block 8): "
              "early stop on / off")


def legend_texts(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def assert_readable(fig) -> None:
    """Non-empty labels of each panel do not overlap one another and lie inside the panel; the title lies inside
    the figure."""
    renderer = fig.canvas.get_renderer()
    whole = fig.bbox
    title = fig._suptitle.get_window_extent(renderer)
    assert whole.x0 <= title.x0 and title.x1 <= whole.x1 and whole.y0 <= title.y0 and title.y1 <= whole.y1
    for ax in fig.axes:
        panel = ax.get_window_extent(renderer)
        boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().strip()]
        for i, box in enumerate(boxes):
            assert panel.x0 <= box.x0 and box.x1 <= panel.x1 and panel.y0 <= box.y0 and box.y1 <= panel.y1
            assert not any(box.overlaps(other) for other in boxes[i + 1:])


def assert_legend_covers(fig, points: pd.DataFrame) -> None:
    texts = set(legend_texts(fig))
    methods = set(points["method"]) - {"oracle"}
    assert methods <= texts
    caches = {"no cache" if c == "none" else f"cache {c}" for c in points["cache"]}
    assert caches <= texts


def test_every_registered_cache_has_its_own_marker():
    markers = cache_markers()
    assert set(markers) == set(CACHES) and len(set(markers.values())) == len(markers)
    assert markers["none"] == "o" and "P" not in markers.values()  # P: the published points


def test_method_colours_stay_distinct_past_ten_methods():
    for n in (3, 11, 20, 27):
        colours = method_colours([f"m{i}" for i in range(n)])
        assert len(set(colours.values())) == n


def test_plot_title_leaves_out_what_the_title_says():
    assert plot_title(LONG_TITLE, "sudoku", "gen 24, block 8, early stop off/on, count cut") == LONG_TITLE + " (count cut)"
    assert plot_title("Demo", "gsm8k") == "Demo (gsm8k)"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_plots_are_readable(name):
    points = run_points(read_runs([SHIPPED[name]]))
    fig = frontier_figure(points, title=LONG_TITLE)
    try:
        assert_legend_covers(fig, points)
        assert_readable(fig)
        models = sorted(points["model"].unique())
        assert [ax.get_title() for ax in fig.axes] == [m for m in models for _ in range(3)]  # a row per model
        tok_s = [ax for ax in fig.axes if ax.get_xlabel().startswith("tokens / s")]
        hollow = sum(len(c.get_facecolors()) == 0 for ax in tok_s for c in ax.collections
                     if isinstance(c, PathCollection))
        assert hollow == int((points["loaded"] == True).sum())  # noqa: E712 - object column
        if hollow:
            assert any("loaded machine" in t for t in legend_texts(fig))
    finally:
        plt.close(fig)


def test_demo_plot_is_readable_and_draws_a_rescore_once():
    runs = read_runs([DEMO])
    runs["task.scoring"] = "lm_eval"
    copy = runs.iloc[[1]].copy()
    copy["generation_run_id"], copy["run_id"] = copy["run_id"], copy["run_id"] + ".paper"
    copy["task.scoring"], copy["n_correct"], copy["accuracy"] = "paper", 150, 0.75
    both = pd.concat([runs, copy], ignore_index=True)
    both["generation_run_id"] = both.get("generation_run_id", "").fillna("")
    points = run_points(both)
    assert len(points) == len(runs) and 75.0 not in set(points["accuracy"])  # the table's scoring kept, once
    fig = frontier_figure(points, title="demo")
    try:
        assert_legend_covers(fig, points)
        assert_readable(fig)
    finally:
        plt.close(fig)


def test_frontier_search_plot_is_readable():
    rows = [("a", 0.0, 90, 6.0), ("b", 0.2, 95, 7.0), ("c", 0.5, 94, 7.5), ("t", 0.8, 93, 5.0), ("u", 0.9, 96, 8.0)]
    runs = pd.DataFrame([{"run_id": r, "policy.name": "blocks", "rule.name": "frechet" if r < "t" else "threshold",
                          "rule.delta": d, "rule.threshold": d, "cache.name": "none", "n_samples": 100, "n_correct": c,
                          "accuracy": c / 100, "tokens_per_s": 1.0, "tokens_per_forward": 16.0 / nfe,
                          "nfe_mean": nfe, "gen_length": 24} for r, d, c, nfe in rows])
    runs["accuracy_ci_low"], runs["accuracy_ci_high"] = zip(*(wilson_interval(c, 100) for _, _, c, _ in rows))
    studies = [Study("frechet-1", "frechet", "search", [], [{"number": i, "run_id": r, "params": {"rule.delta": d}}
                                                            for i, (r, d, *_) in enumerate(rows[:3])]),
               Study("threshold-1", "threshold", "search", [], [{"number": i, "run_id": r, "params": {"rule.threshold": d}}
                                                                for i, (r, d, *_) in enumerate(rows[3:])])]
    fig = search_figure(studies, runs, LONG_TITLE + " " + LONG_TITLE)
    try:
        assert {"frechet", "threshold"} <= set(legend_texts(fig))
        assert_readable(fig)
    finally:
        plt.close(fig)
