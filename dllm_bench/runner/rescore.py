"""Score stored completions again under another `task.scoring` mode: no generation, no model, no GPU.

Every sample row keeps the completion of both modes (`completion_lm_eval`, `completion_paper`) and both
`cut` token counts, so a run decoded once can be scored as current lm-eval does and as the papers did. A
rescored run is a run of its own: `<generation run id>.<mode>` beside its source, with its own runs.csv row
(`rescored_from`, `generation_run_id`); timing and NFE are the generation run's.
"""

from __future__ import annotations

import copy
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dllm_bench.runner.config import flatten, local
from dllm_bench.runner.environment import scoring_versions
from dllm_bench.runner.store import ResultsStore, _atomic_write_text, packed, read_jsonl
from dllm_bench.runner.summary import count_column, summarise, summarise_timing
from dllm_bench.runner.validate import ConfigError, build_task
from dllm_bench.tasks.base import SCORING_MODES
from dllm_bench.tasks.executed import verdict_fields


class RescoreError(ValueError):
    """A run cannot be rescored; the message names the run and why."""


def run_dirs(path: Path | str) -> list[Path]:
    """The run folders under `path`: a run (has run.json), an experiment folder, or a results folder."""
    path = Path(path)
    if (path / "run.json").is_file():
        return [path]
    if not path.is_dir():
        raise RescoreError(f"{str(path)!r} is not a run folder (with run.json) or a results folder")
    found = sorted(p.parent for p in path.glob("run.json")) or sorted(p.parent for p in path.glob("*/run.json"))
    found = found or sorted(p.parent for p in path.glob("*/*/run.json"))
    if not found:
        raise RescoreError(f"no run.json under {str(path)!r}: give a run folder or a results folder")
    return found


def rescored_run_id(generation_run_id: str, mode: str) -> str:
    """`<generation run id>.<mode>`: the same id whatever chain of rescorings led to it."""
    return f"{generation_run_id}.{mode}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def timing_subsample(run_dir: Path, rows: list[dict[str, Any]], timing_docs: int | None) -> list[dict[str, Any]] | None:
    """The generation run's batch-1 timing rows of its first `timing_docs` scored documents; None without a pass."""
    path = run_dir / "timing.jsonl"
    if timing_docs is None or not path.is_file():
        return None
    ids = {str(r["sample_id"]) for r in rows}
    return sorted((r for r in read_jsonl(path) if str(r["sample_id"]) in ids), key=lambda r: r["doc_index"])[:timing_docs]


def rescore_run(run_dir: Path | str, mode: str, workers: int | None = None) -> dict[str, Any]:
    """Score the stored completions of one run under `mode`; write the rescored run and its runs.csv row."""
    if mode not in SCORING_MODES:
        raise RescoreError(f"scoring={mode!r} is not allowed: choose one of {', '.join(SCORING_MODES)}")
    run_dir = Path(run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    samples = read_jsonl(run_dir / "samples.jsonl")
    field = f"completion_{mode}"
    if not samples:
        raise RescoreError(f"run {run_dir}: samples.jsonl has no rows to rescore")
    if any(field not in r for r in samples):
        raise RescoreError(f"run {run_dir}: its samples have no {field!r} (written before scoring modes existed); "
                           "rerun the generation to rescore it")
    config = copy.deepcopy(info["config"])
    config["task"]["scoring"] = mode
    try:
        task = build_task(local(config["task"]))
    except ConfigError as err:
        raise RescoreError(f"run {run_dir}: {err}") from None
    by_id = {str(d["sample_id"]): d for d in task.all_docs()}
    missing = [r["sample_id"] for r in samples if str(r["sample_id"]) not in by_id]
    if missing:
        raise RescoreError(f"run {run_dir}: {len(missing)} stored samples (e.g. {missing[0]!r}) are not in the "
                           f"task's data; point task.data_files at the data the run used")
    docs = [by_id[str(r["sample_id"])] for r in samples]
    scores = task.score_many([r[field] for r in samples], docs, workers=workers)
    counted = count_column(config["count_rule"], mode)
    rows = []
    for row, score in zip(samples, scores):
        new = dict(row, completion=row[field], extracted=score.extracted, gold=score.gold,
                   correct=bool(score.correct), scoring=mode, **verdict_fields(score.details))
        new["tokens_per_forward"] = new[counted] / new["nfe"] if new["nfe"] else math.nan
        rows.append(new)
    generation_id = info.get("generation_run_id") or info["run_id"]
    run_id = rescored_run_id(generation_id, mode)
    store = ResultsStore(run_dir.parent.parent, run_dir.parent.name, run_id)
    try:
        return _write_rescored(store, info, config, rows, run_dir, mode, run_id, generation_id)
    finally:
        store.close()


def _write_rescored(store: ResultsStore, info: dict[str, Any], config: dict[str, Any], rows: list[dict[str, Any]],
                    run_dir: Path, mode: str, run_id: str, generation_id: str) -> dict[str, Any]:
    """The rescored run's files and runs.csv row (under the rescored folder's lock)."""
    _atomic_write_text(store.samples_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    packed(store.samples_path).unlink(missing_ok=True)  # the plain file now holds every row
    summary = summarise(rows, config["count_rule"], mode)
    timed = timing_subsample(run_dir, rows, config.get("timing_docs"))
    if timed is not None:  # the batched mode: the generation run's batch-1 pass, counted under `mode`
        summary.update(summarise_timing(timed, rows, config["count_rule"], mode))
    extra = {"rescored_from": info["run_id"], "generation_run_id": generation_id, "rescored_at": _now(),
             "scoring_versions": scoring_versions()}  # this process scored the rows, whatever the generation used
    store.write_run_json({**info, "run_id": run_id, "config": config, "summary": summary, **extra})
    env = info.get("environment") or {}
    row = {"run_id": run_id, **flatten(config), **summary, "world_size": 1, "device_name": info.get("device_name"),
           "git_commit": env.get("git_commit"), "math_verify": extra["scoring_versions"]["math-verify"],
           "started_at": info.get("started_at"),
           "finished_at": info.get("finished_at"), "rescored_from": info["run_id"], "generation_run_id": generation_id}
    store.upsert_runs_csv(row)
    return row


def rescore(path: Path | str, mode: str, workers: int | None = None) -> list[dict[str, Any]]:
    """Rescore the run at `path`, or every run under a folder not already scored in `mode`."""
    dirs = run_dirs(path)
    if not (Path(path) / "run.json").is_file():  # a folder: skip runs whose generation was already scored in `mode` (and their rescorings)
        infos = {d: json.loads((d / "run.json").read_text()) for d in dirs}
        done = {i.get("generation_run_id") or i["run_id"] for i in infos.values()
                if i["config"]["task"].get("scoring", "lm_eval") == mode}
        dirs = [d for d, i in infos.items() if (i.get("generation_run_id") or i["run_id"]) not in done]
    return [rescore_run(d, mode, workers) for d in dirs]
