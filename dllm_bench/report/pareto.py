"""Accuracy-vs-speed Pareto frontiers: one point per run, a frontier per method, published points overlaid."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dllm_bench.report.published import PublishedRow
from dllm_bench.report.tables import BENCHMARK_SIZES

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


def run_points(runs: pd.DataFrame) -> pd.DataFrame:
    """One plotting row per run: method, cache, parameter label and the metrics (accuracy in percent)."""
    needed = ["policy.name", "rule.name", "cache.name", "accuracy", "tokens_per_s", "tokens_per_forward", "nfe_mean"]
    missing = [c for c in needed if c not in runs.columns]
    if missing:
        raise ValueError(f"runs lack columns {missing}; expected the runner's runs.csv schema (docs/runner.md)")
    out = pd.DataFrame({
        "method": [method_name(p, r) for p, r in zip(runs["policy.name"].astype(str), runs["rule.name"].astype(str))],
        "cache": runs["cache.name"].astype(str),
        "accuracy": 100.0 * pd.to_numeric(runs["accuracy"]),
        "tokens_per_s": pd.to_numeric(runs["tokens_per_s"]),
        "tokens_per_forward": pd.to_numeric(runs["tokens_per_forward"]),
        "nfe_mean": pd.to_numeric(runs["nfe_mean"]),
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


def plot_frontiers(
    points: pd.DataFrame,
    out_stem: Path | str,
    published: list[PublishedPoint] | None = None,
    title: str = "",
) -> list[Path]:
    """Three panels (tok/s, tok/forward, NFE) with per-method frontiers; writes `<stem>.png` and `<stem>.pdf`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if points.empty and not published:
        raise ValueError("nothing to plot: no runs and no published points")
    methods = sorted(m for m in points["method"].unique() if m != ORACLE)
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    markers = {"none": "o", "prefix": "s", "dual": "D", "dllm": "^"}
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for ax, (column, xlabel, larger_better) in zip(axes, AXES.values()):
        for method in methods:
            sub = points[points["method"] == method].dropna(subset=[column, "accuracy"])
            for cache, group in sub.groupby("cache"):
                ax.scatter(group[column], group["accuracy"], color=colours[method], marker=markers.get(cache, "o"),
                           s=36, zorder=3, label=f"{method} ({cache})")
            for _, row in sub.iterrows():
                if row["label"]:
                    ax.annotate(row["label"], (row[column], row["accuracy"]), fontsize=7, xytext=(3, 3),
                                textcoords="offset points")
            if len(sub):
                front = sub.iloc[pareto_front(sub[column].to_numpy(), sub["accuracy"].to_numpy(), larger_better)]
                front = front.sort_values(column)
                ax.step(front[column], front["accuracy"], where="post" if larger_better else "pre",
                        color=colours[method], lw=1.2, alpha=0.8)
        oracle = points[points["method"] == ORACLE].dropna(subset=[column])
        for _, row in oracle.iterrows():
            ax.axvline(row[column], color="black", ls=":", lw=1)
            ax.scatter([row[column]], [row["accuracy"]], color="black", marker="*", s=90, zorder=4,
                       label=f"oracle floor ({row['cache']})")
        if published:
            px = [(getattr(p, column), p.accuracy) for p in published if getattr(p, column) is not None]
            if px:
                ax.scatter(*zip(*px), facecolors="none", edgecolors="grey", marker="P", s=70, zorder=2,
                           label="published")
        ax.set_xlabel(xlabel + ("  (→ better)" if larger_better else "  (← better)"))
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    fig.legend(unique.values(), unique.keys(), loc="lower center", ncol=min(6, len(unique)), fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    return save_figure(fig, out_stem)


def save_figure(fig, out_stem: str | Path) -> list[Path]:
    """Write ``<out_stem>.png`` and ``.pdf`` and close the figure."""
    import matplotlib.pyplot as plt

    out_stem = Path(out_stem)
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [out_stem.with_suffix(".png"), out_stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return paths
