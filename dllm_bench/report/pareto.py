"""Accuracy-vs-speed Pareto frontiers: one point per run, a frontier per method, published points overlaid."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dllm_bench.report.published import PublishedRow
from dllm_bench.report.tables import BENCHMARK_SIZES
from dllm_bench.runner.summary import wilson_interval

# x axis -> (runs.csv column, axis label, whether larger is better)
AXES = {
    "tokens_per_s": ("tokens_per_s", "tokens / s", True),
    "tokens_per_forward": ("tokens_per_forward", "tokens per forward (Tok/NFE)", True),
    "nfe": ("nfe_mean", "NFE per sample", False),
}
# rule name -> the parameter printed on its points
PARAM_LABELS = {"frechet": ("rule.delta", "δ"), "threshold": ("rule.tau", "τ"), "factor": ("rule.f", "f")}
ORACLE = "oracle"


def method_name(policy: str, rule: str) -> str:
    """A run's method label: its rule, or the policy when the policy commits by its own rule (rule none)."""
    if rule == "none":
        return policy
    return rule if policy == "blocks" else f"{policy}+{rule}"


def pareto_front(x: np.ndarray, y: np.ndarray, larger_x_better: bool) -> np.ndarray:
    """Indices of the non-dominated points (higher y, better x), ordered from best x to worst.

    Sort by x from best to worst (ties: higher y first) and keep each point whose y beats every point
    with a better-or-equal x seen before it.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    keyed_x = -x if larger_x_better else x
    order = np.lexsort((-y, keyed_x))
    running = np.maximum.accumulate(np.concatenate([[-np.inf], y[order][:-1]]))
    return order[y[order] > running]


def dominating(x: np.ndarray, y: np.ndarray, x0: float, y0: float, larger_x_better: bool) -> np.ndarray:
    """Mask of the points that dominate (x0, y0): y at least as high, x at least as good, better in one.

    ``pareto_front`` keeps exactly the points (one of each duplicate) that no point dominates."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    x_ge = x >= x0 if larger_x_better else x <= x0
    x_gt = x > x0 if larger_x_better else x < x0
    return (y >= y0) & x_ge & ((y > y0) | x_gt)


def _number_column(runs: pd.DataFrame, column: str) -> pd.Series:
    """A numeric column, NaN where absent or empty."""
    if column not in runs.columns:
        return pd.Series(np.nan, index=runs.index)
    return pd.to_numeric(runs[column].replace("", np.nan), errors="coerce")


def _loaded_column(runs: pd.DataFrame) -> pd.Series:
    """runs.csv `machine_loaded` as True/False, None where the run predates the column."""
    if "machine_loaded" not in runs.columns:
        return pd.Series([None] * len(runs), index=runs.index, dtype=object)
    return runs["machine_loaded"].astype(str).map({"True": True, "False": False}).astype(object)


def batch1_tokens_per_s(runs: pd.DataFrame) -> pd.Series:
    """Each run's tokens/s, from its batch-1 timing pass where it has one (the batched mode, runs.csv `timing_*`)."""
    own = pd.to_numeric(runs["tokens_per_s"])
    if "timing_tokens_per_s" not in runs.columns:
        return own
    return pd.to_numeric(runs["timing_tokens_per_s"], errors="coerce").fillna(own)


def run_points(runs: pd.DataFrame) -> pd.DataFrame:
    """One plotting row per run: method, cache, parameter label, n, the metrics and the 95 % Wilson interval
    of accuracy (all in percent), and whether its throughput was measured on a loaded machine (tokens/s: the batch-1
    timing pass's where a run has one)."""
    needed = ["policy.name", "rule.name", "cache.name", "accuracy", "tokens_per_s", "tokens_per_forward", "nfe_mean"]
    missing = [c for c in needed if c not in runs.columns]
    if missing:
        raise ValueError(f"runs lack columns {missing}; expected the runner's runs.csv schema (docs/runner.md)")
    n = _number_column(runs, "n_samples")
    low, high = _number_column(runs, "accuracy_ci_low"), _number_column(runs, "accuracy_ci_high")
    correct = _number_column(runs, "n_correct").fillna(pd.to_numeric(runs["accuracy"]) * n)
    for i in runs.index[low.isna() & n.gt(0)]:  # older runs.csv files carry no interval: computed from the counts
        low[i], high[i] = wilson_interval(float(correct[i]), float(n[i]))
    out = pd.DataFrame({
        "method": [method_name(p, r) for p, r in zip(runs["policy.name"].astype(str), runs["rule.name"].astype(str))],
        "cache": runs["cache.name"].astype(str),
        "accuracy": 100.0 * pd.to_numeric(runs["accuracy"]),
        "ci_low": 100.0 * low,
        "ci_high": 100.0 * high,
        "n": n,
        "tokens_per_s": batch1_tokens_per_s(runs),
        "tokens_per_forward": pd.to_numeric(runs["tokens_per_forward"]),
        "nfe_mean": pd.to_numeric(runs["nfe_mean"]),
        "loaded": _loaded_column(runs),
    })
    labels = []
    for _, row in runs.iterrows():
        column, symbol = PARAM_LABELS.get(str(row["rule.name"]), (None, ""))
        value = row.get(column, "") if column else ""
        labels.append(f"{symbol}={float(value):g}" if column and str(value) not in ("", "nan") else "")
    out["label"] = labels
    return out


@dataclass(frozen=True)
class PublishedPoint:
    """A published cell as a point; None where the paper prints no value for that axis."""

    method: str
    accuracy: float
    tokens_per_s: float | None
    tokens_per_forward: float | None
    nfe_mean: float | None
    label: str


def published_points(rows: list[PublishedRow]) -> list[PublishedPoint]:
    """Published rows as points: Tok/NFE from the note, NFE per sample = printed total / full test-set size."""
    points = []
    for row in rows:
        acc = row.number("accuracy")
        if acc is None:
            continue
        note = row["note"]
        tpf = None
        if "Tok/NFE " in note:
            tpf = float(note.split("Tok/NFE ", 1)[1].split(";", 1)[0])
        nfe, size = row.number("nfe"), BENCHMARK_SIZES.get(row["task"])
        points.append(PublishedPoint(row["method"], acc, row.number("tokens_per_s"), tpf,
                                     nfe / size if nfe and size else None,
                                     f"{row['paper']} {row['table']} {row['method']} {row['method_param']}".strip()))
    return points


CACHE_MARKERS = {"none": "o", "prefix": "s", "dual": "D", "dllm": "^"}
# candidate label offsets (points) around a point, nearest first: the first that overlaps nothing is taken
LABEL_OFFSETS = [(dx * r, dy * r) for r in (1, 2, 3, 4) for dx, dy in
                 ((4, 3), (4, -9), (-4, 3), (-4, -9), (0, 9), (0, -15), (10, -3), (-10, -3))]


def place_labels(ax, items: list[tuple[float, float, str]]) -> None:
    """Annotate (x, y, text) points so that no label overlaps another label or a drawn point.

    Greedy: each label takes the nearest free candidate offset; one that finds none gets a leader line at the
    farthest offset. Call after the figure's layout is final (positions are measured on the canvas)."""
    renderer = ax.figure.canvas.get_renderer()
    to_display = ax.transData.transform
    from matplotlib.transforms import Bbox

    taken = [Bbox.from_extents(px - 4, py - 4, px + 4, py + 4)
             for px, py in to_display(np.array([(x, y) for x, y, _ in items]).reshape(-1, 2))]
    for x, y, text in sorted(items, key=lambda item: (-item[1], item[0])):
        for k, (dx, dy) in enumerate(LABEL_OFFSETS):
            last = k == len(LABEL_OFFSETS) - 1
            note = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7,
                               ha="left" if dx >= 0 else "right", va="bottom" if dy >= 0 else "top",
                               arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "grey"} if last else None)
            box = note.get_window_extent(renderer).expanded(1.05, 1.15)
            if last or not any(box.overlaps(other) for other in taken):
                taken.append(box)
                break
            note.remove()


def _n_text(n: pd.Series) -> str:
    known = sorted({int(v) for v in n.dropna()})
    if not known:
        return ""
    return f"n = {known[0]} documents per run" if len(known) == 1 else f"n = {known[0]}–{known[-1]} documents per run"


def plot_frontiers(
    points: pd.DataFrame,
    out_stem: Path | str,
    published: list[PublishedPoint] | None = None,
    title: str = "",
) -> list[Path]:
    """`frontier_figure` written to `<stem>.png` and `<stem>.pdf`."""
    return save_figure(frontier_figure(points, published, title), out_stem)


def frontier_figure(points: pd.DataFrame, published: list[PublishedPoint] | None = None, title: str = ""):
    """Three panels (tok/s, tok/forward, NFE) with per-method frontiers, as a matplotlib figure.

    Accuracy carries its 95 % Wilson interval; colour = method, marker = cache (one legend entry each); runs
    on fewer documents than the largest are drawn faint with their n in the label; on the tokens/s panel,
    runs timed on a loaded machine are hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    if points.empty and not published:
        raise ValueError("nothing to plot: no runs and no published points")
    methods = sorted(m for m in points["method"].unique() if m != ORACLE)
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)} | {ORACLE: "black"}
    full_n = points["n"].max() if points["n"].notna().any() else np.nan
    several_n = points["n"].dropna().nunique() > 1
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2))
    labels_per_ax = []
    for ax, (column, xlabel, larger_better) in zip(axes, AXES.values()):
        items = []
        for method in [*methods, ORACLE]:
            sub = points[points["method"] == method].dropna(subset=[column, "accuracy"])
            for _, row in sub.iterrows():
                faint = several_n and row["n"] < full_n
                hollow = column == "tokens_per_s" and row["loaded"] is True
                colour = colours[method]
                if not np.isnan(row["ci_low"]):
                    below, above = max(0.0, row["accuracy"] - row["ci_low"]), max(0.0, row["ci_high"] - row["accuracy"])
                    ax.errorbar(row[column], row["accuracy"], yerr=[[below], [above]],
                                fmt="none", ecolor=colour, elinewidth=0.8, capsize=2, alpha=0.35 if faint else 0.7,
                                zorder=2)
                ax.scatter([row[column]], [row["accuracy"]], marker=CACHE_MARKERS.get(row["cache"], "o"), s=36,
                           facecolors="none" if hollow else [colour], edgecolors=[colour],
                           linewidths=1.2, alpha=0.45 if faint else 1.0, zorder=3)
                text = row["label"] + (f" n={int(row['n'])}" if faint else "")
                if text.strip():
                    items.append((float(row[column]), float(row["accuracy"]), text.strip()))
            if method == ORACLE:
                for _, row in sub.iterrows():
                    ax.axvline(row[column], color="black", ls=":", lw=1, zorder=1)
            elif len(sub):
                front = sub.iloc[pareto_front(sub[column].to_numpy(), sub["accuracy"].to_numpy(), larger_better)]
                front = front.sort_values(column)
                ax.step(front[column], front["accuracy"], where="post" if larger_better else "pre",
                        color=colours[method], lw=1.2, alpha=0.8)
        if published:
            px = [(getattr(p, column), p.accuracy) for p in published if getattr(p, column) is not None]
            if px:
                ax.scatter(*zip(*px), facecolors="none", edgecolors="grey", marker="P", s=70, zorder=2)
        note = "  (→ better)" if larger_better else "  (← better)"
        if column == "tokens_per_s" and (points["loaded"] == True).any():  # noqa: E712 - object column
            note += "\nhollow: timed on a loaded machine (load average > CPUs)"
        ax.set_xlabel(xlabel + note)
        ax.set_ylabel("accuracy (%), bars: 95 % Wilson interval")
        ax.grid(alpha=0.3)
        labels_per_ax.append(items)
    handles = [Line2D([], [], color=colours[m], marker="o", lw=1.2, label=m) for m in methods]
    if (points["method"] == ORACLE).any():
        handles.append(Line2D([], [], color="black", marker="o", ls=":", lw=1,
                              label="oracle: a bound (reference decode untimed), not a method"))
    for cache in [c for c in CACHE_MARKERS if c in set(points["cache"])]:
        handles.append(Line2D([], [], color="grey", marker=CACHE_MARKERS[cache], ls="none", label=f"cache {cache}"))
    if published:
        handles.append(Line2D([], [], color="grey", marker="P", markerfacecolor="none", ls="none", label="published"))
    if several_n:
        handles.append(Line2D([], [], color="grey", marker="o", alpha=0.45, ls="none",
                              label=f"faint: n < {int(full_n)} (n in label)"))
    fig.legend(handles=handles, loc="lower center", ncol=min(10, len(handles)), fontsize=8)
    heading = "; ".join(t for t in (title, _n_text(points["n"])) if t)
    if heading:
        fig.suptitle(heading)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    for ax, items in zip(axes, labels_per_ax):
        place_labels(ax, items)
    return fig


# No creation date or library version in the files: rebuilding a plot from the same runs rewrites the same bytes.
STABLE_METADATA = {".png": {"Software": None}, ".pdf": {"CreationDate": None, "Producer": None, "Creator": None}}


def save_figure(fig, out_stem: str | Path) -> list[Path]:
    """Write ``<out_stem>.png`` and ``.pdf`` (byte-identical for identical figures) and close the figure."""
    import matplotlib.pyplot as plt

    out_stem = Path(out_stem)
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [out_stem.with_suffix(".png"), out_stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=120, metadata=STABLE_METADATA[path.suffix])
    plt.close(fig)
    return paths
