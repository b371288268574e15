"""Host-device syncs per decoding step, counted by op (dllm_bench/decoding/syncs.py) on the shipped tiny checkpoints.

Every setting decodes sudoku prompts (batch 1 and batch 8) on the CPU; the count is what a GPU run would wait
for, since a sync is defined by the op (``bool``/``item``/``tolist``/``nonzero``, boolean-mask indexing,
``bincount``, ``equal``, ``.cpu()``, Python values copied into tensors), not by the device. By default the
accelerator's code path runs (``dllm_bench.models.host.accelerator_path``); ``--cpu-path`` counts the CPU's.

Usage:  PYTHONPATH=. python scripts/count_syncs.py [--batches 1 8] [--gen 64 --block 16] [--by-op]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dllm_bench.decoding import DecodeSpec, Decoding, build_cache, build_policy, build_selector, generate  # noqa: E402
from dllm_bench.decoding.syncs import SyncCounter  # noqa: E402
from dllm_bench.models import load_model  # noqa: E402
from dllm_bench.models.host import accelerator_path  # noqa: E402

CHECKPOINTS = ROOT / "dllm_bench" / "tiny" / "checkpoints"
PUZZLE_PROMPT_IDS = None  # filled on first use from the tiny tokenizer
# setting name -> (flavour, policy, policy params, rule, rule params, cache, budget per step)
RULES = {"threshold": {"tau": 0.9}, "frechet": {"delta": 0.25}, "factor": {"f": 1.0}, "topk": {}}
SETTINGS: dict[str, tuple] = {}
for _rule, _params in RULES.items():
    for _cache in ("none", "prefix", "dual"):
        SETTINGS[f"blocks/{_rule}/{_cache}"] = ("llada", "blocks", {"steps": "gen"} if _rule == "topk" else {},
                                                _rule, _params, _cache, 3)
# the field's later rules (one file each in dllm_bench/decoding/rules/), at their defaults, without a cache
for _rule in ("eb_sampler", "entropy_threshold", "hierarchy", "local_leap", "credit"):
    SETTINGS[f"blocks/{_rule}/none"] = ("llada", "blocks", {}, _rule, {}, "none", 3)
SETTINGS["wino/none"] = ("llada", "wino", {}, None, {}, "none", 3)
SETTINGS["blocks/threshold/dllm"] = ("llada", "blocks", {}, "threshold", {"tau": 0.9}, "dllm", 5)
for _cache in ("none", "prefix"):  # KLASS: the next block's distributions (no dual cache); PC-Sampler: fixed count
    SETTINGS[f"blocks/klass/{_cache}"] = ("llada", "blocks", {}, "klass", {}, _cache, 3)
    SETTINGS[f"blocks/pc_sampler/{_cache}"] = ("llada", "blocks", {"steps": "gen"}, "pc_sampler", {}, _cache, 3)
SETTINGS["blocks/klass_dream/none"] = ("dream", "blocks", {}, "klass", {"variant": "dream"}, "none", 3)
SETTINGS["blocks/topk/dkv"] = ("llada", "blocks", {"steps": "gen"}, "topk", {}, "dkv", 3)
# dKV-Cache-Greedy: a cached step reads how many commits a row has (they bound the window walk) and the width of
# its query set (which sizes the forward)
SETTINGS["blocks/random_order/dkv_greedy"] = ("llada", "blocks", {"steps": "gen"}, "random_order", {}, "dkv_greedy", 4)
# Elastic-Cache: one read more per step than dual, its refresh decision (the layer each row's drift test fired at)
SETTINGS["blocks/threshold/elastic"] = ("llada", "blocks", {}, "threshold", {"tau": 0.9}, "elastic", 4)
SETTINGS["dream/maskgit_plus/dkv"] = ("dream", "dream", {"steps": "gen", "alg": "maskgit_plus"}, None, {}, "dkv", 3)
for _rule, _params in (("topk", {}), ("threshold", {"tau": 0.9})):
    SETTINGS[f"blocks/{_rule}/sparse_dllm"] = ("llada", "blocks", {"steps": "gen"} if _rule == "topk" else {},
                                               _rule, _params, "sparse_dllm", 3)
# d2Cache reads two more values a step than the engine's one read: the width of its query set (how many positions
# its rollout nucleus and certainty density chose, which sizes the forward) and the candidates that forward
# queried (the LM head runs on those; the others get zero logits, as published)
SETTINGS["blocks/threshold/d2cache"] = ("llada", "blocks", {}, "threshold", {"tau": 0.9}, "d2cache", 5)
SETTINGS["blocks/threshold/d2cache_dream"] = ("dream", "blocks", {}, "threshold", {"tau": 0.9}, "d2cache", 5)
SETTINGS["slowfast/code/none"] = ("llada", "slowfast", {"preset": "code"}, None, {}, "none", 5)
SETTINGS["slowfast/dream/none"] = ("dream", "slowfast", {"preset": "dream"}, None, {}, "none", 5)
SETTINGS["dream/maskgit_plus/none"] = ("dream", "dream", {"steps": "gen", "alg": "maskgit_plus"}, None, {}, "none", 5)
SETTINGS["dream/entropy/none"] = ("dream", "dream", {"steps": "gen", "alg": "entropy"}, None, {}, "none", 5)


def tiny_model(flavour: str):
    return load_model(CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype="float32")


def sudoku_prompts(model, batch: int) -> torch.Tensor:
    """The first ``batch`` held-out puzzles' prompt ids (equal lengths: no padding)."""
    from dllm_bench.tasks.sudoku import SudokuTask
    from dllm_bench.tiny.encoding import prompt_ids

    rows = SudokuTask(limit=batch).docs()
    return torch.tensor([prompt_ids(model.tokenizer, r["puzzle"]) for r in rows], dtype=torch.long)


def decode_spec(setting: str, gen: int, block: int) -> DecodeSpec:
    flavour, policy, pparams, rule, rparams, cache, _ = SETTINGS[setting]
    pparams = {k: gen if v == "gen" else v for k, v in pparams.items()}
    block = gen if policy == "dream" or pparams.get("preset") == "dream" or rparams.get("variant") == "dream" else block
    return DecodeSpec(Decoding(gen, block, build_policy(policy, **pparams),
                               build_selector(rule, **rparams) if rule else None, build_cache(cache)))


def count(model, prompts: torch.Tensor, spec: DecodeSpec, accelerator: bool = True) -> dict:
    """Syncs of one ``generate`` call: total, loop steps, per step, and by op."""
    with torch.no_grad(), (accelerator_path() if accelerator else contextlib.nullcontext()), SyncCounter() as c:
        out = generate(model, prompts, None, spec)
    steps = max(r.nfe for r in out.records)
    return {"total": c.total, "steps": steps, "per_step": c.total / steps, "by_op": dict(c.by_op),
            "tokens": out.tokens, "nfe": [r.nfe for r in out.records]}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS), metavar="SETTING")
    ap.add_argument("--cpu-path", action="store_true", help="count the CPU's code path instead of the accelerator's")
    ap.add_argument("--by-op", action="store_true", help="also print the syncs by op")
    args = ap.parse_args(argv)
    if args.gen % args.block:
        ap.error(f"--gen {args.gen} is not a multiple of --block {args.block}")
    torch.set_num_threads(2)
    models, rows = {}, []
    print(f"{'setting':28s} {'batch':>5s} {'steps':>5s} {'syncs':>6s} {'per step':>8s} {'budget':>6s}")
    for setting in args.settings:
        flavour, budget = SETTINGS[setting][0], SETTINGS[setting][-1]
        model = models.get(flavour) or models.setdefault(flavour, tiny_model(flavour))
        for batch in args.batches:
            res = count(model, sudoku_prompts(model, batch), decode_spec(setting, args.gen, args.block),
                        accelerator=not args.cpu_path)
            rows.append(dict(setting=setting, batch=batch, budget=budget, **res))
            print(f"{setting:28s} {batch:5d} {res['steps']:5d} {res['total']:6d} {res['per_step']:8.2f} {budget:6d}")
            if args.by_op:
                print("    " + ", ".join(f"{k} {v}" for k, v in sorted(res["by_op"].items(), key=lambda kv: -kv[1])))
    return rows


if __name__ == "__main__":
    main()
