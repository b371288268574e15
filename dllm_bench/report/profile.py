"""Confidence-profile analysis of step traces: what threshold, factor and Fréchet would commit on the same steps.

Input: the runner's `traces.jsonl` (one line per sample: `{"sample_id", "doc_index", "steps": [{"step",
"sorted_confidences", "n_committed", "frechet_core", "frechet_bonus"}, ...]}`, see docs/decoding.md).
Every rule is applied to the identical sorted candidate confidences of each traced step, so the comparison
isolates the rule from the trajectory it would have produced.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dllm_bench.decoding.commit_masks import factor_count_sorted, frechet_count_sorted, frechet_gap_sorted
from dllm_bench.report.pareto import PARAM_LABELS, method_name, save_figure
from dllm_bench.report.runs import read_runs
from dllm_bench.runner.config import flatten
from dllm_bench.runner.renames import renamed_flat

RULE_PAIRS = (("frechet", "factor"), ("frechet", "threshold"), ("factor", "threshold"))


def read_trace_steps(paths: list[Path | str]) -> list[dict]:
    """Every traced step with candidates, tagged with its sample id and file."""
    steps = []
    for path in paths:
        opened = gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else Path(path).open(encoding="utf-8")
        with opened as handle:
            for line_no, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{line_no}: not JSON ({err})") from None
                for step in record.get("steps") or []:
                    if step and step.get("sorted_confidences"):
                        steps.append({**step, "sample_id": record.get("sample_id"), "source": str(path)})
    return steps


# the counterfactual parameter each traced rule's own runs are analysed with
RULE_PARAMS = {"threshold": "tau", "factor": "f", "frechet": "delta"}


@dataclass(frozen=True)
class TraceGroup:
    """Traced runs of one method and parameter: what their profiles can be read as."""

    label: str                 # e.g. "frechet δ=0.25", "topk", "oracle"
    method: str
    params: dict[str, float]   # the group's own rule parameter (empty for other methods)
    files: tuple[Path, ...]


def _run_setting(run_dir: Path) -> dict[str, str] | None:
    """A run folder's flattened config: its run.json, else its row of the sibling runs.csv."""
    info = run_dir / "run.json"
    if info.is_file():
        return renamed_flat({k: str(v) for k, v in flatten(json.loads(info.read_text())["config"]).items()})
    runs_csv = run_dir.parent / "runs.csv"
    if runs_csv.is_file():
        rows = read_runs([runs_csv])
        match = rows[rows["run_id"] == run_dir.name]
        if len(match):
            return dict(match.iloc[0])
    return None


def trace_groups(results_dir: Path | str) -> list[TraceGroup]:
    """Every `<results>/<name>/<run>/traces.jsonl`, grouped by method and its parameter (sorted by label).

    Pooling traces of different methods would mix trajectories (a sequential run commits one token per
    step, the oracle many), so each group is analysed on its own."""
    groups: dict[str, tuple[str, dict[str, float], list[Path]]] = {}
    # a run's traces, plain or packed for the repository (runner.store.pack_run)
    for path in sorted([*Path(results_dir).glob("*/*/traces.jsonl"), *Path(results_dir).glob("*/*/traces.jsonl.gz")]):
        setting = _run_setting(path.parent)
        if setting is None:
            label, method, params = f"unknown setting ({path.parent.name})", "", {}
        else:
            rule = str(setting.get("rule.name", ""))
            method = method_name(str(setting.get("policy.name", "blocks")), rule)
            column, symbol = PARAM_LABELS.get(rule, (None, ""))
            value = setting.get(column, "") if column else ""
            params = {RULE_PARAMS[rule]: float(value)} if column and value not in ("", "nan") else {}
            label = f"{method} {symbol}={float(value):g}" if params else method
            preset = setting.get("policy.preset", "")
            label += f" ({preset} preset)" if preset and preset not in ("", "nan") else ""
        groups.setdefault(label, (method, params, []))[2].append(path)
    return [TraceGroup(label, sel, params, tuple(files)) for label, (sel, params, files) in sorted(groups.items())]


def padded_profiles(steps: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted confidences as one float64 batch [S, N_max] (zeros after each row's candidates) and counts [S]."""
    n_cand = torch.tensor([len(s["sorted_confidences"]) for s in steps], dtype=torch.long)
    width = int(n_cand.max()) if len(steps) else 0
    conf = torch.zeros(len(steps), width, dtype=torch.float64)
    for i, s in enumerate(steps):
        conf[i, : n_cand[i]] = torch.tensor(s["sorted_confidences"], dtype=torch.float64)
    return conf, n_cand


def rule_counts(conf: torch.Tensor, n_cand: torch.Tensor, tau: float, f: float, delta: float) -> dict[str, torch.Tensor]:
    """Tokens each rule commits per step on sorted profiles (paper forms; every rule commits at least one)."""
    within = torch.arange(conf.shape[1]).unsqueeze(0) < n_cand.unsqueeze(1)
    threshold = ((conf >= tau) & within).sum(dim=1).clamp_min(1)
    return {
        "threshold": threshold,
        "factor": factor_count_sorted(conf, n_cand, f),
        "frechet": frechet_count_sorted(conf, n_cand, delta),
    }


@dataclass(frozen=True)
class ProfileAnalysis:
    """Per-step commits by rule, the Fréchet decomposition at its chosen n, and pairwise rule comparisons."""

    commits: pd.DataFrame      # one row per step: n_candidates, observed, threshold, factor, frechet
    decomposition: pd.DataFrame  # one row per step: n (Fréchet's choice), core, bonus, gap
    comparison: pd.DataFrame   # one row per rule pair: more, equal, fewer (fractions of steps)
    params: dict[str, float]
    source: str = ""           # whose traces: e.g. "frechet δ=0.25: 3 traced run(s)"

    def commit_distribution(self) -> pd.DataFrame:
        """Number of steps committing k tokens, per rule (rows k, columns rules)."""
        cols = ["observed", "threshold", "factor", "frechet"]
        return pd.DataFrame({c: self.commits[c].value_counts() for c in cols}).fillna(0).astype(int).sort_index()


def analyse_profiles(steps: list[dict], tau: float = 0.9, f: float = 0.75, delta: float = 0.25,
                     source: str = "") -> ProfileAnalysis:
    """Apply threshold τ, factor f and Fréchet δ to every traced step and compare them."""
    if not steps:
        raise ValueError("no traced steps with candidates: run with trace=true (the tiny preset does)")
    conf, n_cand = padded_profiles(steps)
    counts = rule_counts(conf, n_cand, tau, f, delta)
    gap, core = frechet_gap_sorted(conf)
    chosen = (counts["frechet"] - 1).unsqueeze(1)
    commits = pd.DataFrame({
        "sample_id": [s["sample_id"] for s in steps],
        "step": [s.get("step") for s in steps],
        "n_candidates": n_cand.numpy(),
        "observed": [int(s["n_committed"]) for s in steps],
        **{rule: c.numpy() for rule, c in counts.items()},
    })
    core_n = core.gather(1, chosen).squeeze(1).numpy()
    gap_n = gap.gather(1, chosen).squeeze(1).numpy()
    decomposition = pd.DataFrame({"n": counts["frechet"].numpy(), "core": core_n, "bonus": gap_n - core_n,
                                  "gap": gap_n})
    rows = []
    for a, b in RULE_PAIRS:
        diff = np.sign(commits[a].to_numpy() - commits[b].to_numpy())
        rows.append({"rule": a, "versus": b, "more": float(np.mean(diff > 0)), "equal": float(np.mean(diff == 0)),
                     "fewer": float(np.mean(diff < 0))})
    return ProfileAnalysis(commits, decomposition, pd.DataFrame(rows), {"tau": tau, "f": f, "delta": delta},
                           source)


def analyse_group(group: TraceGroup, tau: float = 0.9, f: float = 0.75, delta: float = 0.25) -> ProfileAnalysis:
    """The analysis of one group's traces; a threshold/factor/Fréchet group is read with its own parameter."""
    params = {"tau": tau, "f": f, "delta": delta, **group.params}
    return analyse_profiles(read_trace_steps(list(group.files)), **params,
                            source=f"{group.label}: {len(group.files)} traced run(s)")


def plot_profile(analysis: ProfileAnalysis, out_stem: Path | str, title: str = "") -> list[Path]:
    """Commit histogram per rule, bonus B_n vs factor core at Fréchet's n, and who commits more; PNG + PDF."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    dist = analysis.commit_distribution()
    dist.plot.bar(ax=axes[0], width=0.8)
    axes[0].set_xlabel("tokens committed in the step")
    axes[0].set_ylabel("steps")
    axes[0].set_title("commits per step by rule (same profiles)")
    dec = analysis.decomposition
    points = axes[1].scatter(dec["core"], dec["bonus"], s=8, alpha=0.5, c=dec["n"], cmap="viridis")
    fig.colorbar(points, ax=axes[1], label="n: tokens Fréchet commits in the step")
    lo = float(min(dec["core"].min(), -1.0))
    xs = np.linspace(lo, 1.0, 50)
    axes[1].plot(xs, analysis.params["delta"] - xs, "k--", lw=1, label="core + B = δ (commit boundary)")
    axes[1].set_xlabel("factor core 1 - (n+1)(1 - c_n)")
    axes[1].set_ylabel("heterogeneity bonus B_n")
    axes[1].set_title("Fréchet gap at its chosen n = core + bonus")
    axes[1].legend(fontsize=8)
    comp = analysis.comparison.set_index(analysis.comparison["rule"] + " vs " + analysis.comparison["versus"])
    comp[["more", "equal", "fewer"]].plot.barh(stacked=True, ax=axes[2])
    axes[2].set_xlabel("fraction of steps")
    axes[2].set_title("which rule commits more")
    heading = title or analysis.source
    fig.suptitle(f"{heading} ({len(analysis.commits)} traced steps)" if heading else
                 f"{len(analysis.commits)} traced steps")
    fig.tight_layout()
    return save_figure(fig, out_stem)


def profile_markdown(analysis: ProfileAnalysis) -> str:
    """The analysis as Markdown tables (distribution, mean commits, comparison)."""
    p = analysis.params
    rules = f"threshold τ={p['tau']:g}, factor f={p['f']:g}, Fréchet δ={p['delta']:g}"
    heading = f"## Confidence profiles of {analysis.source}" if analysis.source else f"## Confidence profiles: {rules}"
    lines = [heading, "",
             f"{len(analysis.commits)} traced steps; every rule ({rules}) applied to the same sorted confidences; "
             "`observed` = what the traced runs committed.", "",
             "Mean tokens per step: " + ", ".join(
                 f"{c} {analysis.commits[c].mean():.3f}" for c in ("observed", "threshold", "factor", "frechet")), "",
             "| tokens in step | observed | threshold | factor | frechet |", "|---|---|---|---|---|"]
    for k, row in analysis.commit_distribution().iterrows():
        lines.append(f"| {k} | {row['observed']} | {row['threshold']} | {row['factor']} | {row['frechet']} |")
    lines += ["", "| rule | versus | commits more | equal | commits fewer |", "|---|---|---|---|---|"]
    for _, r in analysis.comparison.iterrows():
        lines.append(f"| {r['rule']} | {r['versus']} | {r['more']:.3f} | {r['equal']:.3f} | {r['fewer']:.3f} |")
    dec = analysis.decomposition
    lines += ["", f"Heterogeneity bonus at Fréchet's n: mean {dec['bonus'].mean():.4f}, "
              f"share of steps with B_n > 0: {(dec['bonus'] > 1e-12).mean():.3f}.", ""]
    return "\n".join(lines)
