"""The front of a frontier search as a result: the non-dominated runs of each study (accuracy up, NFE down) with
their Wilson intervals, the area each front dominates, d3LLM's AUP, a table and a plot (docs/frontier.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dllm_bench.report.pareto import (
    PARAM_LABELS,
    dominating,
    method_colours,
    pareto_front,
    run_points,
    save_figure,
    wrapped_title,
)
from dllm_bench.report.runs import rename_columns

STORAGE_FILE = "search.db"
# d3LLM's AUP constants (AUP_leaderboard/aup_utils.py): the quality weight's penalty and the accuracy window
AUP_ALPHA = 3.0
AUP_WINDOW = 5.0  # percentage points below the first (least parallel) point's accuracy
ZOOM_POINTS = 12.0  # the plot's accuracy axis spans this many points below the best run (when runs fall below)


def hypervolume(accuracy: np.ndarray, nfe: np.ndarray, ref_nfe: float) -> float:
    """Share of the unit square that the runs dominate, with accuracy (fraction) on one axis and the NFE saved,
    1 - NFE/ref_nfe, on the other; reference point (accuracy 0, NFE ref_nfe).

    Equals the mean over NFE budgets b in [0, ref_nfe] of the best accuracy a run reaches within b: 1 = every
    answer right at no cost. Runs at or above ref_nfe add nothing."""
    accuracy, nfe = np.asarray(accuracy, dtype=float), np.asarray(nfe, dtype=float)
    keep = nfe < ref_nfe
    accuracy, saved = accuracy[keep], 1.0 - nfe[keep] / ref_nfe
    if not len(accuracy):
        return 0.0
    front = pareto_front(saved, accuracy, larger_x_better=True)  # most saved first, accuracy rising
    s, a = saved[front], accuracy[front]
    widths = s - np.append(s[1:], 0.0)
    return float(np.sum(widths * np.clip(a, 0.0, None)))


def aup(tpf: np.ndarray, accuracy_pct: np.ndarray, y_max: float, alpha: float = AUP_ALPHA,
        window: float = AUP_WINDOW) -> float:
    """d3LLM's Accuracy Under Parallelism of (tokens per forward, accuracy %) points.

    Sorted by parallelism rho, points below y_1 - window (y_1: the accuracy of the smallest rho) are dropped;
    AUP = rho_1 y_1 + sum_i (rho_i - rho_{i-1}) (y_i W(y_i) + y_{i-1} W(y_{i-1})) / 2 with the quality weight
    W(y) = min(1, exp(-alpha (1 - y / y_max))), y_max the best accuracy among the methods compared."""
    tpf, acc = np.asarray(tpf, dtype=float), np.asarray(accuracy_pct, dtype=float)
    if not len(tpf):
        return math.nan
    order = np.argsort(tpf, kind="stable")
    rho, y = tpf[order], acc[order]
    keep = y >= y[0] - window
    rho, y = rho[keep], y[keep]
    ratio = y / y_max if y_max > 0 else np.ones_like(y)  # y_max 0: every y is 0, and so is every term
    weighted = y * np.minimum(1.0, np.exp(-alpha * (1.0 - ratio)))
    return float(rho[0] * y[0] + np.sum(np.diff(rho) * (weighted[1:] + weighted[:-1]) / 2.0))


@dataclass
class Study:
    """One search or grid study read from a results folder's SQLite file."""

    name: str
    search: str  # the hparams_search config (or rule) it searched
    kind: str  # "search" | "grid"
    objectives: list[str]
    trials: list[dict] = field(default_factory=list)  # completed: number, run_id, params, values


def load_studies(results_dir: Path | str) -> list[Study]:
    """Every study in `<results_dir>/search.db` with its completed trials (none when the file is absent)."""
    path = Path(results_dir) / STORAGE_FILE
    if not path.exists():
        return []
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{path}"
    studies = []
    for summary in sorted(optuna.get_all_study_summaries(storage=url), key=lambda s: s.study_name):
        study = optuna.load_study(study_name=summary.study_name, storage=url)
        attrs = study.user_attrs
        trials = [{"number": t.number, "run_id": t.user_attrs.get("run_id"), "params": dict(t.params),
                   "values": list(t.values)} for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
        studies.append(Study(summary.study_name, str(attrs.get("search", summary.study_name)),
                             str(attrs.get("kind", "search")), list(attrs.get("objectives", [])), trials))
    return studies


def study_points(study: Study, runs: pd.DataFrame) -> pd.DataFrame:
    """The study's runs as plotting rows (pareto.run_points: accuracy % with its Wilson interval, NFE, tokens per
    forward), one per distinct run, with the searched parameters."""
    ids = list(dict.fromkeys(t["run_id"] for t in study.trials if t["run_id"]))
    sub = runs[runs["run_id"].isin(ids)]
    points = run_points(sub.reset_index(drop=True))
    points.insert(0, "run_id", sub["run_id"].to_numpy())
    params = {t["run_id"]: t["params"] for t in study.trials}
    points["params"] = [", ".join(f"{k.split('.')[-1]}={_fmt(v)}" for k, v in sorted(params[r].items()))
                        for r in points["run_id"]]
    points["gen_length"] = pd.to_numeric(sub["gen_length"]).to_numpy()
    return points


def _fmt(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def summarise_fronts(studies: list[Study], runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per study: runs, front size, hypervolume, AUP; one row per front run), y_max over every study."""
    points = {s.name: study_points(s, runs) for s in studies}
    every = pd.concat(points.values()) if points else pd.DataFrame()
    y_max = float(every["accuracy"].max()) if len(every) else math.nan
    summary, fronts = [], []
    for study in studies:
        p = points[study.name]
        if p.empty:
            continue
        ref = float(p["gen_length"].max())
        idx = pareto_front(p["nfe_mean"].to_numpy(), p["accuracy"].to_numpy(), larger_x_better=False)
        front = p.iloc[idx]
        tpf_idx = pareto_front(p["tokens_per_forward"].to_numpy(), p["accuracy"].to_numpy(), larger_x_better=True)
        summary.append({
            "search": study.search, "kind": study.kind, "study": study.name, "runs": len(p),
            "front_runs": len(front), "n": int(p["n"].max()),
            **_extremes(p),
            "hypervolume": hypervolume(p["accuracy"].to_numpy() / 100.0, p["nfe_mean"].to_numpy(), ref),
            "ref_nfe": ref,
            "aup": aup(p["tokens_per_forward"].to_numpy()[tpf_idx], p["accuracy"].to_numpy()[tpf_idx], y_max),
            "aup_y_max": y_max,
        })
        for _, row in front.iterrows():
            fronts.append({"search": study.search, "kind": study.kind, "params": row["params"],
                           "accuracy": row["accuracy"], "ci_low": row["ci_low"], "ci_high": row["ci_high"],
                           "n": int(row["n"]), "nfe_mean": row["nfe_mean"],
                           "tokens_per_forward": row["tokens_per_forward"], "run_id": row["run_id"]})
    return pd.DataFrame(summary), pd.DataFrame(fronts)


def _extremes(p: pd.DataFrame) -> dict[str, float]:
    """The most accurate run (fewest NFE among ties) and the fewest-NFE run (most accurate among ties), each with
    its own other coordinate: a summary line never pairs numbers of two runs."""
    best = p.sort_values(["accuracy", "nfe_mean"], ascending=[False, True]).iloc[0]
    cheapest = p.sort_values(["nfe_mean", "accuracy"], ascending=[True, False]).iloc[0]
    return {"best_accuracy": float(best["accuracy"]), "best_accuracy_nfe": float(best["nfe_mean"]),
            "least_nfe": float(cheapest["nfe_mean"]), "least_nfe_accuracy": float(cheapest["accuracy"])}


def outside_runs(studies: list[Study], runs: pd.DataFrame) -> pd.DataFrame:
    """The folder's runs that no study holds (e.g. a paper's fixed setting run beside the searches), each with the
    searched runs of its own method that dominate it beyond its 95 % interval (at most as many NFE, accuracy above
    the interval's top): `dominated_by`; and `within_interval_of`: the searched runs that beat it on the point
    estimates but whose accuracy lies inside its interval (a tie the documents cannot separate, not dominance)."""
    in_studies = {t["run_id"] for s in studies for t in s.trials}
    sub = runs[~runs["run_id"].isin(in_studies)].reset_index(drop=True)
    if sub.empty:
        return pd.DataFrame()
    points = run_points(sub)
    points.insert(0, "run_id", sub["run_id"].to_numpy())
    points["setting"] = [_setting(row) for _, row in sub.iterrows()]
    searched = {}
    for study in studies:
        p = study_points(study, runs)
        if study.kind == "search" and not p.empty:
            searched.setdefault(p["method"].iloc[0], []).append(p)
    beaten, tied = [], []
    for _, row in points.iterrows():
        rivals = pd.concat(searched.get(row["method"], [pd.DataFrame(columns=["accuracy", "nfe_mean", "params"])]))
        better = rivals[dominating(rivals["nfe_mean"].to_numpy(), rivals["accuracy"].to_numpy(), row["nfe_mean"],
                                   row["accuracy"], larger_x_better=False)]
        beyond = better["accuracy"] > row["ci_high"] if not np.isnan(row["ci_high"]) else better["accuracy"] > -1
        beaten.append(_rival_list(better[beyond]))
        tied.append(_rival_list(better[~beyond]))
    points["dominated_by"] = beaten
    points["within_interval_of"] = tied
    points["searched"] = [row["method"] in searched for _, row in points.iterrows()]
    return points


def _rival_list(rivals: pd.DataFrame) -> str:
    return "; ".join(f"{r['params']} ({r['accuracy']:.1f} %, NFE {r['nfe_mean']:.2f})"
                     for _, r in rivals.sort_values("nfe_mean").iterrows())


def _setting(row: pd.Series) -> str:
    """A run's decoding setting in a few words: its rule's parameter, or SlowFast's K/τ_min/τ_high/W."""
    if str(row.get("policy.name")) == "slowfast" and str(row.get("rule.name")) == "none":
        return (f"K={int(row['policy.explore_steps'])}, tau_min={row['policy.converge_threshold']:g}, "
                f"tau_high={row['policy.threshold']:g}, W={int(row['policy.stability_window'])}")
    key, _ = PARAM_LABELS.get(str(row.get("rule.name")), (None, None))
    return f"{key.split('.')[1]}={float(row[key]):g}" if key else str(row.get("rule.name"))


def markdown(summary: pd.DataFrame, fronts: pd.DataFrame, title: str, outside: pd.DataFrame | None = None) -> str:
    """The fronts as Markdown: the per-study areas, then each front's runs with their 95 % Wilson intervals."""
    lines = [f"# {title}", "",
             "Hypervolume: share of the (accuracy, 1 - NFE/ref) unit square the runs dominate, reference point "
             "(accuracy 0, NFE = ref = gen_length, one token per forward); the mean over NFE budgets of the best "
             "accuracy within budget. AUP: d3LLM's Accuracy Under Parallelism over the runs' (tokens/forward, "
             f"accuracy %) front, alpha {AUP_ALPHA:g}, window {AUP_WINDOW:g} points, y_max = best accuracy here. "
             "Most accurate run and fewest-NFE run: each a single run, its accuracy and NFE side by side "
             "(ties: the fewer NFE, the higher accuracy).", "",
             "| search | kind | runs | front | n | most accurate run: acc % @ NFE | fewest-NFE run: NFE @ acc % "
             "| hypervolume | AUP |",
             "|---|---|---|---|---|---|---|---|---|"]
    order = summary.assign(grid=summary["kind"] == "grid").sort_values(["search", "grid"])
    for _, r in order.iterrows():
        lines.append(f"| {r['search']} | {r['kind']} | {r['runs']} | {r['front_runs']} | {r['n']} | "
                     f"{r['best_accuracy']:.1f} @ {r['best_accuracy_nfe']:.2f} | "
                     f"{r['least_nfe']:.2f} @ {r['least_nfe_accuracy']:.1f} | {r['hypervolume']:.5f} | {r['aup']:.1f} |")
    if outside is not None and not outside.empty:
        lines += ["", "## Runs outside the studies (fixed settings), against their method's searched front", "",
                  "Dominated: a searched run with at most its NFE and an accuracy above its 95 % interval. A "
                  "searched run that is better on the point estimates but inside that interval is a tie, listed "
                  "as such.", "",
                  "| method | setting | accuracy % [95 % Wilson] | NFE | dominated by (searched runs) |",
                  "|---|---|---|---|---|"]
        for _, r in outside.sort_values(["method", "nfe_mean"]).iterrows():
            tie = r.get("within_interval_of", "")
            verdict = r["dominated_by"] or (f"none (within its interval: {tie})" if tie else
                                            "none: on the front" if r["searched"] else "(no search of this method)")
            lines.append(f"| {r['method']} | {r['setting']} | {r['accuracy']:.1f} [{r['ci_low']:.1f}, "
                         f"{r['ci_high']:.1f}] | {r['nfe_mean']:.2f} | {verdict} |")
    for (search, _, kind), group in fronts.groupby([fronts["search"], fronts["kind"] == "grid", fronts["kind"]]):
        lines += ["", f"## {search} ({kind}): non-dominated runs, least NFE first", "",
                  "| parameters | accuracy % [95 % Wilson] | NFE | tokens/forward | run |", "|---|---|---|---|---|"]
        for _, r in group.sort_values("nfe_mean").iterrows():
            lines.append(f"| {r['params']} | {r['accuracy']:.1f} [{r['ci_low']:.1f}, {r['ci_high']:.1f}] | "
                         f"{r['nfe_mean']:.2f} | {r['tokens_per_forward']:.3f} | `{r['run_id']}` |")
    return "\n".join(lines) + "\n"


def frontier_figure(studies: list[Study], runs: pd.DataFrame, title: str, outside: pd.DataFrame | None = None):
    """Accuracy against NFE and against tokens per forward: every run of each study, its front as a staircase
    with 95 % Wilson bars on the front's runs; searched studies solid and filled, grids dashed and hollow; runs
    outside the studies of a searched method (the papers' fixed settings) as stars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    searches = sorted({s.search for s in studies})
    colours = method_colours(searches)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    every = pd.concat([study_points(s, runs) for s in studies])
    floor = max(0.0, float(every["accuracy"].max()) - ZOOM_POINTS)
    for ax, (column, label, larger) in zip(axes, (("nfe_mean", "NFE per sample  (← better)", False),
                                                  ("tokens_per_forward", "tokens per forward  (→ better)", True))):
        for study in studies:
            p = study_points(study, runs)
            if p.empty:
                continue
            colour, grid = colours[study.search], study.kind == "grid"
            ax.scatter(p[column], p["accuracy"], s=14, alpha=0.35, marker="s" if grid else "o",
                       facecolors="none" if grid else [colour], edgecolors=[colour], zorder=2)
            front = p.iloc[pareto_front(p[column].to_numpy(), p["accuracy"].to_numpy(), larger)].sort_values(column)
            ax.errorbar(front[column], front["accuracy"],
                        yerr=[(front["accuracy"] - front["ci_low"]).clip(lower=0),
                              (front["ci_high"] - front["accuracy"]).clip(lower=0)],
                        fmt="s" if grid else "o", mfc="none" if grid else colour, color=colour, ms=5, capsize=2,
                        elinewidth=0.8, lw=0, zorder=3)
            # the best accuracy within a budget: flat from a front run until the next one improves on it
            ax.step(front[column], front["accuracy"], where="pre" if larger else "post", color=colour, lw=1.3,
                    ls="--" if grid else "-", zorder=3)
            if outside is not None and not outside.empty and not grid:
                fixed = outside[outside["method"] == p["method"].iloc[0]]
                ax.errorbar(fixed[column], fixed["accuracy"],
                            yerr=[(fixed["accuracy"] - fixed["ci_low"]).clip(lower=0),
                                  (fixed["ci_high"] - fixed["accuracy"]).clip(lower=0)],
                            fmt="*", color=colour, mec="black", mew=0.6, ms=11, capsize=2, elinewidth=0.8, lw=0,
                            zorder=4)
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy (%), bars: 95 % Wilson interval")
        ax.grid(alpha=0.3)
        below = int((every["accuracy"] < floor).sum())
        if below:  # the trade-off lives near the best accuracy: a cliff far below would flatten it
            ax.set_ylim(floor, min(100.5, every["accuracy"].max() + 2))
            shown = every.loc[every["accuracy"] >= floor, column]
            pad = 0.05 * (shown.max() - shown.min() or 1.0)
            ax.set_xlim(shown.min() - pad, shown.max() + pad)
            ax.set_title(f"accuracy axis cut at {floor:.0f} %: {below} run(s) below, see the tables", fontsize=8)
    handles = [Line2D([], [], color=colours[s], marker="o", lw=1.3, label=s) for s in searches]
    if any(s.kind == "grid" for s in studies):
        handles.append(Line2D([], [], color="grey", marker="s", mfc="none", ls="--", label="grid (same budget)"))
    if outside is not None and not outside.empty:
        handles.append(Line2D([], [], color="grey", marker="*", mec="black", ms=10, ls="none",
                              label="fixed setting (outside the studies)"))
    fig.legend(handles=handles, loc="lower center", ncol=min(8, len(handles)), fontsize=8)
    heading = wrapped_title(title, fig, 11)
    fig.suptitle(heading, fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1 - (0.25 + 0.2 * (heading.count("\n") + 1)) / fig.get_figheight()))
    return fig


def write_report(results_dir: Path | str, title: str | None = None) -> list[Path]:
    """`frontier.md`, `frontier_summary.csv`, `frontier_fronts.csv` and `frontier.png/.pdf` in `results_dir`,
    from its `search.db` and `runs.csv`."""
    results_dir = Path(results_dir)
    studies = [s for s in load_studies(results_dir) if s.trials]
    if not studies:
        raise FileNotFoundError(f"{results_dir / STORAGE_FILE}: no study with a completed trial; run a search "
                                "first (dllm-bench hparams_search=<rule> ...)")
    runs = rename_columns(pd.read_csv(results_dir / "runs.csv"))
    title = title or f"Frontier search: {results_dir.name}"
    summary, fronts = summarise_fronts(studies, runs)
    outside = outside_runs(studies, runs)
    written = [results_dir / "frontier.md", results_dir / "frontier_summary.csv", results_dir / "frontier_fronts.csv"]
    written[0].write_text(markdown(summary, fronts, title, outside), encoding="utf-8")
    summary.to_csv(written[1], index=False, float_format="%.6g")
    fronts.to_csv(written[2], index=False, float_format="%.6g")
    return written + save_figure(frontier_figure(studies, runs, title, outside), results_dir / "frontier")
