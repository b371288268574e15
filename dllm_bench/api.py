"""The Python API: run an evaluation from the command line's configuration keys and get its rows back, and turn
prompts into the ``input_ids`` that :func:`dllm_bench.decoding.generate` takes.

    import dllm_bench
    rows = dllm_bench.evaluate({"rule": "frechet", "rule.delta": 0.2, "cache": "dual", "limit": 50})
    rows["correct"].mean(), rows.attrs["run"]["tokens_per_s"]

    model = dllm_bench.load_model("dllm_bench/tiny/checkpoints/tiny_llada")
    ids, mask = dllm_bench.encode_prompts(model, ["..../..1./3.../..32"])

    runs = dllm_bench.read_results()            # every results/<name>/runs.csv
    dllm_bench.tables(runs), dllm_bench.plot_pareto(runs, "figures/all")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch


def evaluate(overrides: Mapping[str, Any] | None = None, *, experiment: str | None = None) -> pd.DataFrame:
    """Run (or resume) the run ``dllm-bench [experiment=<experiment>] key=value ...`` would, in this process.

    ``overrides`` are the command line's keys and values (``{"rule": "frechet", "rule.delta": 0.2}``: a config
    group's option or a dotted key). Returns one row per sample (the run's samples.jsonl, in document order) with
    the run's summary row (runs.csv) in ``.attrs["run"]``. Refusals are the command's one-line
    ``dllm_bench.runner.validate.ConfigError``.
    """
    from dllm_bench.report.runs import compose_config
    from dllm_bench.runner.execute import execute
    from dllm_bench.runner.store import read_jsonl

    cfg = compose_config(experiment, dict(overrides or {}))
    cfg.pop("hydra", None)
    run = execute(cfg)
    if run is None:  # a rank other than 0 of a distributed run: rank 0 holds the rows
        return pd.DataFrame()
    folder = Path(cfg["output_dir"]) / str(cfg["name"]) / str(run["run_id"])
    frame = pd.DataFrame(read_jsonl(folder / "samples.jsonl"))
    if "doc_index" in frame:
        frame = frame.sort_values("doc_index", kind="stable").reset_index(drop=True)
    frame.attrs["run"] = dict(run)
    return frame


def encode_prompts(model: Any, prompts: Sequence[str], *, chat: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``input_ids`` and ``attention_mask`` [B, P] for ``generate``, as the runner builds them: each
    prompt as the one user turn of the model's chat template (``chat=True``) or as raw text, tokenized by the
    model's tokenizer and padded on the left with its pad id."""
    from dllm_bench.tasks.chat import chat_wrap, encode_left_padded

    texts = [chat_wrap(p, model.tokenizer) for p in prompts] if chat else list(prompts)
    return encode_left_padded(model.tokenizer, texts, chat, model.config.pad_token_id)


def results_dir() -> Path:
    """The results folder the reports read: ``$DLLM_BENCH_RESULTS``, else the checkout's ``results/``."""
    import os

    from dllm_bench.report.published import REPO_ROOT

    return Path(os.environ.get("DLLM_BENCH_RESULTS", REPO_ROOT / "results"))


def read_results(results: Path | str | None = None) -> pd.DataFrame:
    """Every run recorded under ``results`` (each ``<results>/<name>/runs.csv``), one row per run as text, with
    ``results`` naming its folder and ``source`` its file. Empty (no columns) when there is none."""
    from dllm_bench.report.runs import find_runs_csv, read_runs

    files = find_runs_csv(results_dir() if results is None else results)
    runs = read_runs(files)
    if len(runs):
        runs["results"] = [Path(source).parent.name for source in runs["source"]]
    return runs


def tables(runs: pd.DataFrame) -> list[str]:
    """Markdown of every reproducible table (``dllm-bench-table``'s) whose results folder has rows in ``runs``:
    published, independent reproduction and ours per cell, missing cells saying so."""
    from dllm_bench.report.build import resolve_table
    from dllm_bench.report.render import to_markdown
    from dllm_bench.report.tables import TABLES, results_name

    present = set(runs["results"]) if "results" in runs else set()
    return [to_markdown(spec, resolve_table(spec, runs)) for spec in TABLES.values() if results_name(spec) in present]


def pareto_points(runs: pd.DataFrame) -> pd.DataFrame:
    """One point per run for the frontier plots: method, cache, model, accuracy and its interval, tokens/s
    (batch-1, unloaded flag), tokens per forward, NFE and a label."""
    from dllm_bench.report.pareto import run_points

    return run_points(runs)


def plot_pareto(runs: pd.DataFrame, out_stem: Path | str, title: str = "") -> Path:
    """The accuracy vs tokens/s, tokens/forward and NFE panels of ``runs`` written to ``<out_stem>.png`` (and
    ``.pdf``); returns the PNG's path."""
    from dllm_bench.report.pareto import plot_frontiers

    png, _ = plot_frontiers(pareto_points(runs), out_stem, title=title)
    return png


def confidence_profiles(results: Path | str | None = None) -> list[str]:
    """Markdown of the confidence-profile analysis of each traced rule and parameter under ``results`` (runs
    made with ``trace=true``): one per setting, since pooling different rules would describe none."""
    from dllm_bench.report.profile import analyse_group, profile_markdown, trace_groups

    groups = trace_groups(results_dir() if results is None else results)
    return [profile_markdown(analyse_group(group)) for group in groups]
