"""One run end to end: validate, resume, shard, decode in batches, write rows, merge, summarise."""

from __future__ import annotations

import json
import logging
import math
import random
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from dllm_bench.models.loading import checkpoint_fingerprint
from dllm_bench.runner.completions import COUNT_KEYS, completion_texts, eos_token_id, paper_completion
from dllm_bench.runner.config import compute_run_id, flatten, portable, to_container
from dllm_bench.runner.environment import (
    cpu_count,
    environment_info,
    is_loaded,
    load_average,
    scoring_versions,
)
from dllm_bench.runner.errors import RunInterrupted
from dllm_bench.runner.identity import identity_changes, run_identity
from dllm_bench.runner.interface import Engine, EngineFactory, Generation
from dllm_bench.runner.positions import check_prompts_fit
from dllm_bench.runner.progress import RunProgress, TimingProgress
from dllm_bench.runner.run_config import RunConfig
from dllm_bench.runner.sharding import DistContext, barrier, init_distributed, shard, shutdown
from dllm_bench.runner.store import ResultsStore
from dllm_bench.runner.summary import PAPER_CUT_COLUMN, count_column, summarise, summarise_timing
from dllm_bench.runner.threads import apply_num_threads
from dllm_bench.runner.validate import ConfigError, build_task, validate_config
from dllm_bench.tasks import Task
from dllm_bench.tasks.chat import render_prompt
from dllm_bench.tasks.executed import verdict_fields
from dllm_bench.tracking import track, tracking_settings

log = logging.getLogger("dllm_bench.run")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover
        pass


def _sync(engine: Engine) -> None:
    """Wait for the engine's own device (a run on cuda:1 times cuda:1, not cuda:0); every GPU when it names none."""
    device = getattr(engine, "device", None)
    if device is None:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                torch.cuda.synchronize(i)
        return
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def selected_indices(n_docs: int, offset: int, limit: int | None) -> list[int]:
    """Document indices [offset, offset+limit) clipped to the task size."""
    end = n_docs if limit is None else min(n_docs, offset + limit)
    return list(range(min(offset, n_docs), end))


def select_documents(n_docs: int, offset: int, limit: int | None, task_name: str) -> list[int]:
    """`selected_indices`, refusing a selection without documents (offset past the end, limit 0)."""
    selected = selected_indices(n_docs, offset, limit)
    if not n_docs:  # a task's loader refuses an empty file; a filter (MBPP's test ids) can still leave none
        raise ConfigError(f"task {task_name!r} has no documents to select from; check its data (task.data_files)")
    if not selected:
        raise ConfigError(f"offset={offset}, limit={'null' if limit is None else limit} select no documents: "
                          f"task {task_name!r} has {n_docs}; use offset < {n_docs} and limit >= 1 (or null)")
    return selected


def timing_documents(selected: list[int], run: RunConfig) -> list[int]:
    """The batched mode's timing subsample: the first `timing_docs` selected documents (none when off);
    refused when the selection is smaller, before any folder is made."""
    timing_docs = run.timing_docs
    if timing_docs is None:
        return []
    if timing_docs > len(selected):
        limit = run.limit
        raise ConfigError(f"timing_docs={timing_docs} is not allowed: offset={run.offset}, limit="
                          f"{'null' if limit is None else limit} select {len(selected)} documents of task "
                          f"{run.task.name!r}; use timing_docs <= {len(selected)}")
    return selected[:timing_docs]


def row_seeds(seed: int, indices: list[int]) -> list[int]:
    """One seed per document (seed + document index): sampling noise independent of batch, shard and resume."""
    return [int(seed) + int(i) for i in indices]


def _generate(engine: Engine, task: Task, docs: list[dict], indices: list[int], run: RunConfig
              ) -> tuple[list[str], list[Generation], list[tuple[str, str]], list[tuple[str, int]], float]:
    """Decode one batch: (prompts, generations, (text, raw) and (paper text, paper tokens) per row, seconds from
    prompt rendering to completion text)."""
    chat = bool(run.model.chat)
    seeds = row_seeds(run.seed, indices)
    stop_strings = tuple(task.stop_strings_for(chat))
    extra = engine.prepare([render_prompt(task, d, engine.tokenizer, chat) for d in docs], docs, seeds)
    _sync(engine)
    start = time.perf_counter()
    prompts = [render_prompt(task, doc, engine.tokenizer, chat) for doc in docs]
    gens = engine.generate(prompts, docs, seeds, stop_strings, **extra)
    texts = [completion_texts(g.ids, engine.tokenizer, engine.stop_token_ids, stop_strings) for g in gens]
    eos = eos_token_id(engine.tokenizer, engine.stop_token_ids)
    papers = [paper_completion(raw, engine.tokenizer, stop_strings, eos) for _, raw in texts]
    _sync(engine)
    return prompts, gens, texts, papers, time.perf_counter() - start


def _token_counts(gen: Generation, paper_tokens: int) -> dict[str, int]:
    counts = {f"tokens_{rule}": int(gen.token_counts[key]) for rule, key in COUNT_KEYS.items()}
    counts[PAPER_CUT_COLUMN] = paper_tokens
    return counts


def _known(count: int | None) -> int | None:
    return None if count is None else int(count)


def decode_batch(engine: Engine, task: Task, docs: list[dict], indices: list[int], run: RunConfig,
                 rank: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Decode one batch and score it: (sample rows, trace rows). Timing spans prompt rendering to text."""
    prompts, gens, texts, papers, latency = _generate(engine, task, docs, indices, run)
    scoring = task.scoring
    scored = [paper for paper, _ in papers] if scoring == "paper" else [text for text, _ in texts]
    scores = task.score_many(scored, docs)  # code tasks run their programs in parallel
    rows, traces = [], []
    for doc, index, prompt, gen, (text, raw), (paper, paper_tokens), completion, score in zip(
            docs, indices, prompts, gens, texts, papers, scored, scores):
        counts = _token_counts(gen, paper_tokens)
        counted = counts[count_column(run.count_rule, scoring)]
        rows.append({
            "sample_id": str(doc["sample_id"]),
            "doc_index": index,
            "prompt": prompt,
            "completion": completion,  # the text this run's scoring mode scored
            "completion_lm_eval": text,  # decoded up to the first stop id, cut at the first stop string
            "completion_paper": paper,  # the LLaDA evaluation's text (no cut at the first EOS)
            "raw_completion": raw,  # the whole answer region, special tokens kept
            "scoring": scoring,
            "extracted": score.extracted,
            "gold": score.gold,
            "correct": bool(score.correct),
            "nfe": _known(gen.nfe),  # None: a server that reports no NFE (never guessed)
            "steps": _known(gen.steps),
            **counts,
            "tokens_per_forward": counted / gen.nfe if gen.nfe else math.nan,
            "forward_positions": _known(gen.forward_positions),
            "edits": _known(gen.edits),  # committed tokens rewritten or re-masked (WINO, LLaDA2.1, DMax)
            "wall_time_s": latency / len(docs),
            "latency_s": latency,
            "decode_time_s": gen.decode_time_s,
            "batch_size": len(docs),
            "rank": rank,
            **verdict_fields(score.details),  # code tasks: isolation, sandbox_status, sandbox_reason
        })
        if gen.trace is not None:
            traces.append({"sample_id": str(doc["sample_id"]), "doc_index": index, **gen.trace})
    return rows, traces


def time_alone(engine: Engine, task: Task, doc: dict, index: int, run: RunConfig, rank: int) -> dict[str, Any]:
    """Decode one document alone, unscored: its row of the batched mode's batch-1 timing pass (timing.jsonl)."""
    _, (gen,), ((_, raw),), ((_, paper_tokens),), latency = _generate(engine, task, [doc], [index], run)
    return {"sample_id": str(doc["sample_id"]), "doc_index": index, "raw_completion": raw, "nfe": int(gen.nfe),
            "steps": int(gen.steps), **_token_counts(gen, paper_tokens), "wall_time_s": latency,
            "latency_s": latency, "decode_time_s": gen.decode_time_s, "batch_size": 1, "rank": rank}


def _compile_seconds(engine: Engine) -> float:
    """Seconds the engine has spent compiling its network (0 for an eager or served one: models/compiled.py)."""
    seconds = engine.compile_seconds()
    return 0.0 if seconds is None else float(seconds)


def _time_shard(engine: Engine, task: Task, all_docs: list[dict], mine: list[int], run: RunConfig,
                store: ResultsStore, ctx: DistContext) -> float:
    """The batch-1 timing pass over this rank's share of the timing subsample: warm up at batch 1, then one
    row per document, appended as it ends (a killed pass resumes where it stopped). Returns the seconds its
    warm-up spent compiling."""
    first = mine[0]
    compiled = _compile_seconds(engine)
    for _ in range(run.warmup):  # batch-1 shapes: their own kernels and allocator blocks
        _seed_everything(run.seed)
        _generate(engine, task, [all_docs[first]], [first], run)
    compiled = _compile_seconds(engine) - compiled
    log.info("batch-1 timing pass: %d documents on rank %d", len(mine), ctx.rank)
    bar = TimingProgress(len(mine), run.choices(), bool(run.progress) and ctx.is_main,
                         count_column(run.count_rule, task.scoring))
    try:
        for index in mine:
            _seed_everything(run.seed + index)
            row = time_alone(engine, task, all_docs[index], index, run, ctx.rank)
            store.append_timing([row])
            bar.update(row)
    finally:
        bar.close()
    return compiled


def _decode_shard(engine: Engine, task: Task, all_docs: list[dict], mine: list[int], run: RunConfig,
                  store: ResultsStore, ctx: DistContext, already: int, total: int) -> float:
    """Warm up, then decode this rank's documents batch by batch, appending rows as each batch ends. Returns the
    seconds its warm-up spent compiling (model.compile)."""
    bs = run.batch_size
    batches = [mine[i : i + bs] for i in range(0, len(mine), bs)]
    compiled = _compile_seconds(engine)
    for _ in range(run.warmup):  # compiles kernels, fills allocator caches; never timed or kept
        _seed_everything(run.seed)
        decode_batch(engine, task, [all_docs[i] for i in batches[0]], batches[0], run, ctx.rank)
    compiled = _compile_seconds(engine) - compiled
    desc = run.choices()
    if ctx.world_size > 1:  # rank 0 shows its own shard
        total, already, desc = len(mine), 0, f"{desc} [rank 0 of {ctx.world_size}]"
    bar = RunProgress(total=total, initial=already, desc=desc,
                      enabled=bool(run.progress) and ctx.is_main, count_rule=run.count_rule)
    try:
        for batch in batches:
            _seed_everything(run.seed + batch[0])
            rows, traces = decode_batch(engine, task, [all_docs[i] for i in batch], batch, run, ctx.rank)
            store.append_samples(rows)
            if run.trace and traces:
                store.append_traces(traces)
            bar.update(rows)
    finally:
        bar.close()
    return compiled


def default_engine_factory(run: RunConfig, ctx: DistContext) -> Engine:
    """The decoding engine in this process, or a served one (`backend` other than local: runner/served.py)."""
    if run.served:
        from dllm_bench.runner.served import ServedEngine

        return ServedEngine(run, ctx)
    from dllm_bench.runner.engine import build_engine

    return build_engine(run, ctx)


def config_id(run: RunConfig) -> str:
    """The run id of the configuration alone (weights fingerprint left out): runs sharing it differ only in
    identity (code, data, weights, tokenizer) or selection."""
    return compute_run_id(run.with_fingerprint(None).as_dict())


def changed_run(run: RunConfig, run_id: str, identity: dict[str, Any]) -> tuple[str, list[str]] | None:
    """The latest other run of this configuration and selection in the results folder, made with other code,
    data, weights or tokenizer: (its run id, what changed); None when there is none."""
    folder = Path(run.output_dir) / run.name
    same_config, found = config_id(run), []
    for path in folder.glob("*/run.json"):
        if path.parent.name == run_id:
            continue
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        old = (info.get("sessions") or [{}])[-1].get("identity") or info.get("identity") or {}
        if (old.get("config") == same_config and old.get("selection") == identity["selection"]
                and old.get("backend") == identity.get("backend")):  # a served run never resumes a local one
            found.append((str(info.get("finished_at") or ""), path.parent.name, identity_changes(old, identity)))
    if not found:
        return None
    _, old_id, changes = max(found)
    return old_id, changes


def choose_run(run: RunConfig, run_id: str, identity: dict[str, Any]) -> tuple[str, list[str]]:
    """The run folder this invocation writes, and what changed when it resumes one made under another identity:
    its own id, unless `resume_changed=true` and only an older identity's run of this config exists (or such a
    run was resumed across a change before, and its last session has this identity)."""
    if (Path(run.output_dir) / run.name / run_id).is_dir():
        return run_id, []
    other = changed_run(run, run_id, identity)
    if other is None:
        return run_id, []
    old_id, changes = other
    if not changes:  # resumed across a change before: its last session has this identity
        return old_id, []
    if run.resume_changed:
        log.warning("run %s: resuming across a change (resume_changed=true): %s", old_id, "; ".join(changes))
        return old_id, changes
    log.warning("run %s starts anew: %s has this config with other %s (resume_changed=true resumes it)", run_id,
                old_id, "; ".join(changes))
    return run_id, []


def execute(cfg: DictConfig | dict[str, Any], engine_factory: EngineFactory | None = None) -> dict[str, Any] | None:
    """Run (or resume) one configuration; returns the runs.csv row on rank 0, None on other ranks.

    Data and selection are checked before any folder is made; a run that fails before its first row leaves
    no folder behind. The run folder is locked for the whole run: a twin command waits for it.
    """
    tracking = tracking_settings(to_container(cfg).get("tracking"))
    run = validate_config(cfg)
    task = build_task(run.task.as_dict())
    machine = {"cpu_count": cpu_count(), "num_threads_used": None, "load_avg_start": load_average()}
    started = _now()
    all_docs = task.all_docs()
    selected = select_documents(len(all_docs), run.offset, run.limit, run.task.name)
    timing = timing_documents(selected, run)
    check_prompts_fit(run, task, all_docs, selected)
    # weights are part of a run's identity: a retrained checkpoint never resumes the old checkpoint's runs (a full
    # digest, cached by path, size and times: computed after the cheap refusals); a served run's weights are the
    # server's (its identity names the model the server reports): config.json only, no weight file read
    run = run.with_fingerprint(checkpoint_fingerprint(run.model.name_or_path, weights=not run.served))
    identity = run_identity(run, task, all_docs)
    run_id = compute_run_id(run.as_dict(), identity)
    identity = {"config": config_id(run), **identity}
    ctx = init_distributed()
    run_id, changes = choose_run(run, run_id, identity)
    store = ResultsStore(run.output_dir, run.name, run_id, ctx.rank, ctx.world_size)
    try:
        finished, timed = store.finished_ids(), store.timed_ids()
        todo = [i for i in selected if str(all_docs[i]["sample_id"]) not in finished]
        timing_todo = [i for i in timing if str(all_docs[i]["sample_id"]) not in timed]
        barrier(ctx)  # every rank has read the same finished sets before any rank appends to them
        mine, mine_timed = shard(todo, ctx), shard(timing_todo, ctx)
        log.info("run %s: %d documents selected, %d already done, %d for rank %d/%d", run_id, len(selected),
                 len(selected) - len(todo), len(mine), ctx.rank, ctx.world_size)
        device_name = "none (nothing to decode)"
        if mine or mine_timed:
            machine["num_threads_used"] = apply_num_threads(run.num_threads, str(run.model.name_or_path))
            engine = (engine_factory or default_engine_factory)(run, ctx)
            device_name = engine.device_name
            warm = 0.0
            if mine:
                warm += _decode_shard(engine, task, all_docs, mine, run, store, ctx, len(selected) - len(todo),
                                      len(selected))
            if mine_timed:
                warm += _time_shard(engine, task, all_docs, mine_timed, run, store, ctx)
            if run.model.compile is not False:  # compile time in the warm-up, and any left in the timed batches
                machine["compile_warmup_s"] = round(warm, 3)
                machine["compile_timed_s"] = round(_compile_seconds(engine) - warm, 3)
        barrier(ctx)
        row = None
        if ctx.is_main:
            machine["load_avg_end"] = load_average()
            session = {"identity": identity, **({"identity_changes": changes} if changes else {}),
                       **({"client_concurrency": client_concurrency(run)} if run.served else {})}
            row = _finalise(run, run_id, store, all_docs, selected, started, device_name, ctx, machine, session)
    except KeyboardInterrupt:
        kept = len(store.finished_ids())
        store.discard_if_empty()
        raise RunInterrupted(kept) from None
    except BaseException:
        store.discard_if_empty()
        raise
    finally:
        store.close()
    barrier(ctx)
    shutdown(ctx)
    if row is not None and tracking is not None:
        log.info("run %s tracked: %s", run_id, track(tracking, row, store.read_run_json(), run.output_dir))
    return row


def client_concurrency(run: RunConfig) -> int:
    """The most requests a served run has in flight: `backend.concurrency`, at most a batch."""
    return min(int(run.backend.concurrency), int(run.batch_size)) if run.backend is not None else 1


def served_columns(identity: dict[str, Any], summary: dict[str, Any], sessions: list[dict[str, Any]]
                   ) -> dict[str, Any]:
    """runs.csv's record of a served run's server (none for a local run): its URL, the model it reported, and the
    client-side throughput: requests and output tokens (`count_rule`) per second of the batches' wall time, first
    request to last answer, at `client_concurrency` requests in flight (that of the sessions that decoded; null
    when they differ). Counted by this client, not by the engine (`throughput_counted=client`)."""
    server = identity.get("backend")
    if not server:
        return {}
    wall = float(summary["wall_time_s_total"])
    used = {s.get("client_concurrency") for s in sessions}
    return {"server_url": server.get("url"), "server_model": server.get("model"), "throughput_counted": "client",
            "client_concurrency": used.pop() if len(used) == 1 else None,
            "client_requests_per_s": summary["n_samples"] / wall if wall > 0 else math.nan,
            "client_output_tokens_per_s": summary["tokens_total"] / wall if wall > 0 else math.nan}


def _finalise(run: RunConfig, run_id: str, store: ResultsStore, all_docs: list[dict], selected: list[int],
              started: str, device_name: str, ctx: DistContext, machine: dict[str, Any],
              session: dict[str, Any]) -> dict[str, Any]:
    """Merge shards, write run.json and this run's runs.csv row. Provenance (commit, versions, load, machine,
    times) is each decoding invocation's own: one that decoded nothing adds no session and changes none of it
    (a rerun of a finished run rewrites no file)."""
    decoded = not device_name.startswith("none") or store.pending_shards()
    rows = store.merge()
    wanted = {str(all_docs[i]["sample_id"]) for i in selected}
    rows = [r for r in rows if r["sample_id"] in wanted]
    scoring = run.scoring
    summary = summarise(rows, run.count_rule, scoring)
    if run.timing_docs is not None:
        subsample = {str(all_docs[i]["sample_id"]) for i in selected[: run.timing_docs]}
        timed = [r for r in store.timing_rows() if r["sample_id"] in subsample]
        if len(timed) < len(subsample):
            log.warning("run %s: %d of %d timing documents have no batch-1 row", run_id, len(subsample) - len(timed),
                        len(subsample))
        summary.update(summarise_timing(timed, rows, run.count_rule, scoring))
    if len(rows) < len(wanted):
        log.warning("run %s: %d of %d selected documents have no row", run_id, len(wanted) - len(rows), len(wanted))
    previous = store.read_run_json()
    sessions = list(previous.get("sessions", []))
    if decoded or not sessions or session.get("identity_changes"):  # a resume across a change is recorded
        env = environment_info()
        sessions.append({"started_at": started, "finished_at": _now(), "world_size": ctx.world_size,
                         "device_name": device_name, "decoded": decoded, **machine, "git_commit": env["git_commit"],
                         "environment": env, "scoring_versions": scoring_versions(), **session})
    # throughput pools every session that decoded rows: any of them on a loaded machine marks the run
    timed = [s for s in sessions if s.get("decoded", True)]
    last = (timed or sessions)[-1]
    loaded = [is_loaded([s.get("load_avg_start"), s.get("load_avg_end")], int(s.get("cpu_count") or 1))
              for s in timed]
    env = last.get("environment") or previous.get("environment") or {}
    versions = last.get("scoring_versions") or previous.get("scoring_versions") or scoring_versions()
    info = {
        "run_id": run_id,
        "name": run.name,
        "config": portable(run.as_dict()),
        "identity": previous.get("identity") or session["identity"],
        "summary": summary,
        "environment": env,
        "scoring_versions": versions,
        "device_name": last.get("device_name"),
        "started_at": sessions[0]["started_at"],
        "finished_at": last["finished_at"],
        "sessions": sessions,
    }
    if previous and not decoded:  # keys a no-op rerun has no say in, as they were
        info = {**info, **{k: previous[k] for k in ("environment", "scoring_versions", "device_name", "started_at",
                                                     "finished_at") if k in previous}}
    store.write_run_json(info)
    bookkeeping = {k: last.get(k) for k in ("cpu_count", "num_threads_used", "load_avg_start", "load_avg_end")}
    bookkeeping.update({k: last[k] for k in ("compile_warmup_s", "compile_timed_s") if k in last})
    # a session that only merged reports the threads of the last one that decoded
    bookkeeping["num_threads_used"] = next((s["num_threads_used"] for s in reversed(timed)
                                            if s.get("num_threads_used") is not None), None)
    row = {"run_id": run_id, **flatten(portable(run.as_dict())), **summary, "task_docs": len(all_docs),
           "world_size": last.get("world_size", ctx.world_size), "device_name": info["device_name"], **bookkeeping,
           **served_columns(info["identity"], summary, timed or sessions),
           "machine_loaded": True if True in loaded else None if None in loaded or not loaded else False,
           "git_commit": last.get("git_commit", env.get("git_commit")), "math_verify": versions.get("math-verify"),
           "started_at": info["started_at"], "finished_at": info["finished_at"]}
    store.upsert_runs_csv(row)
    return row
