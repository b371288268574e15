"""Evaluate a tiny checkpoint with the decoding engine: every rule x {no cache, dual cache} on held-out puzzles.

    python -m dllm_bench.tiny.evaluate dllm_bench/tiny/checkpoints/tiny_llada --write-card

Writes ``eval_results_gen<G>_block<B>.json`` beside the checkpoint and, with ``--write-card``, regenerates ``MODEL_CARD.md``
from it and ``train_log.json``. Accuracy = solved puzzles (valid grid keeping every clue); NFE = forwards per
puzzle; tokens/forward and tokens/s use the LLaDA counting rule (answer cut at the first stop string,
re-tokenized, stop tokens dropped: 16 digits per puzzle); tokens/s = those tokens / wall time of the
``generate`` calls at the stated batch size on this machine's CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dllm_bench.decoding import (
    Accounting,
    DecodeSpec,
    Decoding,
    build_cache,
    build_policy,
    build_rule,
    generate,
)
from dllm_bench.models import load_model
from dllm_bench.tasks.sudoku import SudokuTask
from dllm_bench.tiny.encoding import DEFAULT_GEN_LENGTH, encode_batch
from dllm_bench.tiny.results import results_table


@dataclass(frozen=True)
class DecodeSetting:
    """One row of the table: a policy and a rule by their builder names and parameters."""

    label: str
    policy: str
    policy_params: dict = field(default_factory=dict)
    rule: str | None = None
    rule_params: dict = field(default_factory=dict)
    flavours: tuple[str, ...] = ("llada", "dream")


def decode_settings(gen_length: int, block_length: int) -> list[DecodeSetting]:
    """Sequential, the aggressive parallel baselines, the adaptive rules, SlowFast and the oracle."""
    blocks = gen_length // block_length
    return [
        DecodeSetting("sequential (top-1, one token per step)", "blocks", {"steps": gen_length}, "topk"),
        DecodeSetting("whole block in one step (top-k)", "blocks", {"steps": blocks}, "topk"),
        DecodeSetting("threshold 0.9", "blocks", {}, "threshold", {"threshold": 0.9}),
        DecodeSetting("threshold 0.5", "blocks", {}, "threshold", {"threshold": 0.5}),
        DecodeSetting("threshold 0.3", "blocks", {}, "threshold", {"threshold": 0.3}),
        DecodeSetting("factor 1.0", "blocks", {}, "factor", {"f": 1.0}),
        DecodeSetting("Fréchet 0.25", "blocks", {}, "frechet", {"delta": 0.25}),
        DecodeSetting("SlowFast (code preset)", "slowfast", {"preset": "code"}),
        DecodeSetting("SlowFast (paper preset)", "slowfast", {"preset": "paper"}),
        DecodeSetting("oracle (commit exactly the correct candidates)", "blocks", {}, "oracle"),
        DecodeSetting("Dream maskgit_plus, one token per step", "dream",
                      {"steps": gen_length, "alg": "maskgit_plus"}, flavours=("dream",)),
    ]


CACHES = ("none", "dual")


def evaluate_setting(model, rows: list[dict], setting: DecodeSetting, cache_name: str, *, gen_length: int,
                     block_length: int, batch_size: int) -> dict:
    """Decode all rows with one setting and cache; accuracy, NFE and speed as a dict (or the reason it cannot run)."""
    tok, cfg = model.tokenizer, model.config
    task = SudokuTask()
    policy = build_policy(setting.policy, **setting.policy_params)
    rule = build_rule(setting.rule, **setting.rule_params) if setting.rule else None
    cache = build_cache(cache_name)
    try:
        spec = DecodeSpec(Decoding(gen_length, block_length, policy, rule, cache, early_stop=True),
                          accounting=Accounting(tokenizer=tok, stop_strings=task.stop_strings))
    except ValueError as err:
        return {"label": setting.label, "cache": cache_name, "skipped": str(err)}
    solved = valid = nfe = tokens = 0
    wall = 0.0
    for lo in range(0, len(rows), batch_size):
        batch = rows[lo:lo + batch_size]
        prompts, answers = encode_batch(tok, cfg, [r["puzzle"] for r in batch], [r["solution"] for r in batch],
                                        gen_length)
        t0 = time.perf_counter()
        out = generate(model, prompts, torch.ones_like(prompts), spec,
                       reference=answers if setting.rule == "oracle" else None)
        wall += time.perf_counter() - t0
        texts = tok.batch_decode(out.tokens, skip_special_tokens=False)
        for text, row, rec in zip(texts, batch, out.records):
            score = task.score(text, row)
            solved += score.correct
            valid += score.details["valid"]
            nfe += rec.nfe
            tokens += rec.token_counts["tokens"]
    n = len(rows)
    return {
        "label": setting.label, "cache": cache_name, "n": n, "accuracy": solved / n, "valid_grid": valid / n,
        "mean_nfe": nfe / n, "tokens_per_forward": tokens / nfe, "tokens_per_s": tokens / wall,
        "wall_s": wall,
    }


def evaluate_checkpoint(checkpoint: Path, *, limit: int, gen_length: int, block_length: int,
                        batch_size: int, threads: int) -> dict:
    """All settings x caches on the first `limit` held-out puzzles; returns the results document."""
    torch.set_num_threads(threads)
    model = load_model(checkpoint, device="cpu", dtype="float32")
    rows = SudokuTask(limit=limit).docs()
    load_start = os.getloadavg()[0]
    results = []
    for setting in decode_settings(gen_length, block_length):
        if model.config.flavour not in setting.flavours:
            continue
        for cache_name in CACHES:
            res = evaluate_setting(model, rows, setting, cache_name, gen_length=gen_length,
                                   block_length=block_length, batch_size=batch_size)
            print(json.dumps(res), flush=True)
            results.append(res)
    return {
        "command": "python -m dllm_bench.tiny.evaluate " + " ".join(sys.argv[1:]),
        "checkpoint": str(checkpoint), "flavour": model.config.flavour, "puzzles": len(rows),
        "gen_length": gen_length, "block_length": block_length, "batch_size": batch_size, "threads": threads,
        "early_stop": True, "temperature": 0.0, "torch": torch.__version__,
        "machine": f"{platform.machine()} CPU, {threads} thread(s)", "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpu_count": os.cpu_count(), "load_avg": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "results": results,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--limit", type=int, default=500, help="held-out puzzles (default: all 500)")
    ap.add_argument("--gen-length", type=int, default=DEFAULT_GEN_LENGTH)
    ap.add_argument("--block-length", type=int, default=None, help="default: gen_length (one block)")
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default: <checkpoint>/eval_results_gen<G>_block<B>.json)")
    ap.add_argument("--write-card", action="store_true", help="regenerate <checkpoint>/MODEL_CARD.md")
    args = ap.parse_args(argv)
    block_length = args.block_length or args.gen_length
    doc = evaluate_checkpoint(args.checkpoint, limit=args.limit, gen_length=args.gen_length,
                              block_length=block_length, batch_size=args.batch_size, threads=args.threads)
    out = args.out or args.checkpoint / f"eval_results_gen{args.gen_length}_block{block_length}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(results_table(doc))
    if args.write_card:
        from dllm_bench.tiny.model_card import write_model_card

        print(f"wrote {write_model_card(args.checkpoint)}")


if __name__ == "__main__":
    main()
