"""Accuracy-vs-speed Pareto frontiers: one point per run, a frontier per method, published points overlaid."""

from __future__ import annotations

import re
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
PARAM_LABELS = {"frechet": ("rule.delta", "δ"), "threshold": ("rule.threshold", "τ"), "factor": ("rule.f", "f")}
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
    runs = one_point_per_generation(runs)
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
    out["model"] = [model_name(p) for p in runs["model.name_or_path"]] if "model.name_or_path" in runs else ""
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


# markers in the order caches take them (sorted registry names, "none" first): filled shapes that read apart at 6 pt
# ("P" is the published points' marker)
MARKER_CYCLE = ("o", "s", "D", "^", "v", "X", "p", "h", "<", ">", "d", "H", "8", "*")
LABEL_FONTSIZE = 7


def cache_markers() -> dict[str, str]:
    """One marker per cache of the registry (`dllm_bench.decoding.caches.CACHES`), "none" the circle."""
    from dllm_bench.decoding.caches import CACHES

    names = ["none", *sorted(n for n in CACHES if n != "none")]
    if len(names) > len(MARKER_CYCLE):
        raise ValueError(f"{len(names)} caches but {len(MARKER_CYCLE)} markers: extend MARKER_CYCLE")
    return dict(zip(names, MARKER_CYCLE))


def method_colours(methods: list[str]) -> dict[str, tuple]:
    """A distinct colour per method: tab10 up to 10 methods, tab20 up to 20, evenly spaced hues beyond."""
    import matplotlib.pyplot as plt

    n = len(methods)
    if n <= 10:
        palette = [plt.get_cmap("tab10")(i) for i in range(n)]
    elif n <= 20:
        palette = [plt.get_cmap("tab20")(i) for i in range(n)]
    else:
        palette = [plt.get_cmap("hsv")(i / n) for i in range(n)]
    return dict(zip(methods, palette))


def one_point_per_generation(runs: pd.DataFrame) -> pd.DataFrame:
    """Drop rescored copies of a run (runs.csv `generation_run_id`: same generation, other scoring) where another
    row of the same generation is present: its timing is the generation's, so a second point would repeat it.
    Kept: the row scored in the frame's most common `task.scoring` mode (the table's), else the generation's own."""
    if "generation_run_id" not in runs.columns or runs.empty:
        return runs
    generation = runs["generation_run_id"].astype(str).replace({"": None, "nan": None}).fillna(runs["run_id"])
    scoring = runs["task.scoring"].astype(str) if "task.scoring" in runs.columns else pd.Series("", index=runs.index)
    usual = scoring.mode().iloc[0] if len(scoring) else ""
    rank = (scoring != usual).astype(int) * 2 + (generation != runs["run_id"]).astype(int)
    keep = rank.groupby(generation).idxmin()
    return runs.loc[sorted(keep)]


def model_name(path: str) -> str:
    """`tiny_llada` from `<dllm_bench>/tiny/checkpoints/tiny_llada` or a hub id's last part."""
    return str(path).rstrip("/").rsplit("/", 1)[-1] or str(path)


def place_labels(ax, items: list[tuple[float, float, str]]) -> None:
    """Annotate (x, y, text) points with adjustText (labels pushed off each other and off the points, inside the
    axes); a label that still overlaps a placed one or leaves the axes is dropped, so none ever overlap.
    Call after the figure's layout is final (positions are measured on the canvas)."""
    if not items:
        return
    from adjustText import adjust_text

    ax.set_autoscale_on(False)  # leaders drawn below must not move the axes under placed labels
    texts = [ax.text(x, y, text, fontsize=LABEL_FONTSIZE) for x, y, text in items]
    adjust_text(texts, x=[x for x, _, _ in items], y=[y for _, y, _ in items], ax=ax, ensure_inside_axes=True,
                expand=(1.15, 1.3), iter_lim=300)  # a fixed count, not its 1 s default: same bytes each build
    renderer = ax.figure.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    placed = []
    for text, (x, y, _) in zip(texts, items):
        box = text.get_window_extent(renderer)
        fits = inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
        if not fits or any(box.overlaps(other) for other in placed):
            text.remove()
            continue
        placed.append(box)
        px, py = ax.transData.transform((x, y))
        if not box.expanded(1.0, 1.0).contains(px, py) and min(abs(px - box.x0), abs(px - box.x1)) > 6:
            # a leader from the point to the label's nearest side; drawn under the labels and outside text lists
            side_x = box.x0 if abs(px - box.x0) < abs(px - box.x1) else box.x1
            end = ax.transData.inverted().transform((side_x, (box.y0 + box.y1) / 2))
            ax.plot([x, end[0]], [y, end[1]], color="grey", lw=0.5, zorder=1)


def plot_title(title: str, *parts: str) -> str:
    """`title (part; part)`, leaving out each comma-separated piece of the parts whose words the title already has."""
    said = set(re.split(r"[\s/(),:;]+", title.lower()))
    extra = []
    for part in parts:
        pieces = [p.strip() for p in part.split(",")
                  if p.strip() and not set(re.split(r"[\s/]+", p.strip().lower())) <= said]
        if pieces:
            extra.append(", ".join(pieces))
    return f"{title} ({'; '.join(extra)})" if extra else title


def wrapped_title(text: str, fig, fontsize: float) -> str:
    """`text` broken into lines that fit the figure's width (about 0.55 em per character)."""
    import textwrap

    width = max(20, int(fig.get_figwidth() * 72 / (0.55 * fontsize)) - 4)
    return textwrap.fill(text, width)


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
    """Three panels (tok/s, tok/forward, NFE) per model (one row each) with per-method frontiers, as a figure.

    Accuracy carries its 95 % Wilson interval; colour = method, marker = cache (one legend entry each); runs
    on fewer documents than the largest are drawn faint with their n in the label; on the tokens/s panel,
    runs timed on a loaded machine are hollow and stay off the method's front (their speed is the load's).
    Labels name the rule parameter of each front point and of each faint point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    if points.empty and not published:
        raise ValueError("nothing to plot: no runs and no published points")
    if "model" not in points.columns:
        points = points.assign(model="")
    markers = cache_markers()
    unknown = sorted(set(points["cache"]) - set(markers))
    if unknown:
        raise ValueError(f"caches {unknown} are not in the cache registry; known: {sorted(markers)}")
    methods = sorted(m for m in points["method"].unique() if m != ORACLE)
    colours = method_colours(methods) | {ORACLE: "black"}
    models = sorted(points["model"].unique()) or [""]
    full_n = points["n"].max() if points["n"].notna().any() else np.nan
    several_n = points["n"].dropna().nunique() > 1
    any_loaded = bool((points["loaded"] == True).any())  # noqa: E712 - object column
    fig, grid = plt.subplots(len(models), 3, figsize=(16, 1.0 + 4.4 * len(models)), squeeze=False)
    labels_per_ax = []
    for model, axes in zip(models, grid):
        on_model = points[points["model"] == model]
        for ax, (column, xlabel, larger_better) in zip(axes, AXES.values()):
            items = []
            for method in [*methods, ORACLE]:
                sub = on_model[on_model["method"] == method].dropna(subset=[column, "accuracy"])
                loaded = (sub["loaded"] == True) if column == "tokens_per_s" else sub["loaded"].map(lambda _: False)  # noqa: E712
                for (_, row), hollow in zip(sub.iterrows(), loaded):
                    faint = several_n and row["n"] < full_n
                    colour = colours[method]
                    if not np.isnan(row["ci_low"]):
                        below = max(0.0, row["accuracy"] - row["ci_low"])
                        above = max(0.0, row["ci_high"] - row["accuracy"])
                        ax.errorbar(row[column], row["accuracy"], yerr=[[below], [above]], fmt="none", ecolor=colour,
                                    elinewidth=0.8, capsize=2, alpha=0.35 if faint else 0.7, zorder=2)
                    ax.scatter([row[column]], [row["accuracy"]], marker=markers[row["cache"]], s=36,
                               facecolors="none" if hollow else [colour], edgecolors=[colour],
                               linewidths=1.2, alpha=0.45 if faint else 1.0, zorder=3)
                if method == ORACLE:
                    for _, row in sub.iterrows():
                        ax.axvline(row[column], color="black", ls=":", lw=1, zorder=1)
                    continue
                timed = sub[~loaded.to_numpy(dtype=bool)]
                if len(timed):
                    front = timed.iloc[pareto_front(timed[column].to_numpy(), timed["accuracy"].to_numpy(),
                                                    larger_better)].sort_values(column)
                    ax.step(front[column], front["accuracy"], where="post" if larger_better else "pre",
                            color=colours[method], lw=1.2, alpha=0.8)
                    partial = timed[timed["n"] < full_n] if several_n else timed.iloc[:0]
                    for _, row in pd.concat([front, partial.drop(index=front.index, errors="ignore")]).iterrows():
                        faint = several_n and row["n"] < full_n
                        text = (row["label"] + (f" n={int(row['n'])}" if faint else "")).strip()
                        if text:
                            items.append((float(row[column]), float(row["accuracy"]), text))
            if published:
                px = [(getattr(p, column), p.accuracy) for p in published if getattr(p, column) is not None]
                if px:
                    ax.scatter(*zip(*px), facecolors="none", edgecolors="grey", marker="P", s=70, zorder=2)
            ax.set_xlabel(xlabel + ("  (→ better)" if larger_better else "  (← better)"))
            ax.set_ylabel("accuracy (%)")
            if model:
                ax.set_title(model, fontsize=9)
            ax.grid(alpha=0.3)
            labels_per_ax.append((ax, items))
    handles = [Line2D([], [], color=colours[m], marker="o", lw=1.2, label=m) for m in methods]
    if (points["method"] == ORACLE).any():
        handles.append(Line2D([], [], color="black", marker="o", ls=":", lw=1,
                              label="oracle: a bound (reference decode untimed), not a method"))
    for cache in [c for c in markers if c in set(points["cache"])]:
        handles.append(Line2D([], [], color="grey", marker=markers[cache], ls="none",
                              label="no cache" if cache == "none" else f"cache {cache}"))
    if any_loaded:
        handles.append(Line2D([], [], color="grey", marker="o", markerfacecolor="none", ls="none",
                              label="hollow (tok/s): timed on a loaded machine, off the front"))
    if published:
        handles.append(Line2D([], [], color="grey", marker="P", markerfacecolor="none", ls="none", label="published"))
    if several_n:
        handles.append(Line2D([], [], color="grey", marker="o", alpha=0.45, ls="none",
                              label=f"faint: n < {int(full_n)} (n in label)"))
    ncol = min(6, len(handles))
    legend_rows = -(-len(handles) // ncol)
    fig_h = fig.get_figheight()
    legend_h = (0.3 + 0.22 * legend_rows) / fig_h
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8)
    heading = "; ".join(t for t in (title, _n_text(points["n"]), "bars: 95 % Wilson interval") if t)
    wrapped = wrapped_title(heading, fig, 11)
    fig.suptitle(wrapped, fontsize=11)
    title_h = (0.25 + 0.2 * (wrapped.count("\n") + 1)) / fig_h
    fig.tight_layout(rect=(0, legend_h, 1, 1 - title_h))
    for ax, items in labels_per_ax:
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
