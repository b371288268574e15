"""Host-device syncs per decoding step, counted by op (dllm_bench/decoding/syncs.py) on the shipped tiny checkpoints.

The settings are every policy, rule and cache once, in a setting the methods accept
(``dllm_bench.runner.combinations.exercises``), each within the budget its classes declare (``sync_budget``).
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

from dllm_bench.decoding import DecodeSpec, generate  # noqa: E402
from dllm_bench.decoding.caches import CACHES  # noqa: E402
from dllm_bench.decoding.policies import POLICIES  # noqa: E402
from dllm_bench.decoding.rules import RULES  # noqa: E402
from dllm_bench.decoding.syncs import SyncCounter  # noqa: E402
from dllm_bench.models import load_model  # noqa: E402
from dllm_bench.models.host import accelerator_path  # noqa: E402
from dllm_bench.runner.combinations import Exercise, exercises, option_name  # noqa: E402

CHECKPOINTS = ROOT / "dllm_bench" / "tiny" / "checkpoints"
DEFAULT_BUDGET = 3


def budget(exercise: Exercise) -> int:
    """Host reads per step the setting stays within: the largest its policy, rule and cache declare."""
    s = exercise.setting
    rule = option_name("rule", s.rule)
    return max(POLICIES[option_name("policy", s.policy)].sync_budget,
               RULES[rule].sync_budget if rule in RULES else DEFAULT_BUDGET,
               CACHES[option_name("cache", s.cache)].sync_budget)


def settings(gen: int, block: int) -> dict[str, Exercise]:
    """Every method once in a setting that runs it (``runner.combinations.exercises``), by label."""
    return {e.label: e for e in exercises(gen_length=gen, block_length=block)}


SETTINGS = settings(64, 16)  # the labels (a label's setting depends on gen and block only by its lengths)


def tiny_model(flavour: str, switches: tuple[tuple[str, str], ...] = ()):
    """The tiny checkpoint of ``flavour``, run with an exercise's model switches (a block-causal cache's)."""
    return load_model(CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype="float32", **dict(switches))


def sudoku_prompts(model, batch: int) -> torch.Tensor:
    """The first ``batch`` held-out puzzles' prompt ids (equal lengths: no padding)."""
    from dllm_bench.tasks.sudoku import SudokuTask
    from dllm_bench.tiny.encoding import prompt_ids

    rows = SudokuTask(limit=batch).docs()
    return torch.tensor([prompt_ids(model.tokenizer, r["puzzle"]) for r in rows], dtype=torch.long)


def decode_spec(setting: str, gen: int, block: int) -> DecodeSpec:
    return DecodeSpec(settings(gen, block)[setting].setting.decoding())


def reference(model, batch: int, gen: int) -> torch.Tensor:
    """The puzzles' solutions as answer ids [batch, gen]: the oracle rule's reference (other rules ignore it)."""
    from dllm_bench.tasks.sudoku import SudokuTask
    from dllm_bench.tiny.encoding import answer_ids

    rows = SudokuTask(limit=batch).docs()
    cfg = model.config
    return torch.tensor([answer_ids(model.tokenizer, r["solution"], gen, cfg.eos_token_id, cfg.eot_token_id)
                         for r in rows], dtype=torch.long)


def count(model, prompts: torch.Tensor, spec: DecodeSpec, accelerator: bool = True) -> dict:
    """Syncs of one ``generate`` call: total, loop steps, per step, and by op."""
    ref = reference(model, prompts.shape[0], spec.decoding.gen_length)
    with torch.no_grad(), (accelerator_path() if accelerator else contextlib.nullcontext()), SyncCounter() as c:
        out = generate(model, prompts, None, spec, reference=ref)
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
    print(f"{'setting':36s} {'batch':>5s} {'steps':>5s} {'syncs':>6s} {'per step':>8s} {'budget':>6s}")
    for setting in args.settings:
        exercise = settings(args.gen, args.block)[setting]
        flavour, limit = exercise.flavour, budget(exercise)
        key = (flavour, exercise.model_switches)
        model = models.get(key) or models.setdefault(key, tiny_model(flavour, exercise.model_switches))
        for batch in args.batches:
            res = count(model, sudoku_prompts(model, batch), decode_spec(setting, args.gen, args.block),
                        accelerator=not args.cpu_path)
            rows.append(dict(setting=setting, batch=batch, budget=limit, **res))
            print(f"{setting:36s} {batch:5d} {res['steps']:5d} {res['total']:6d} {res['per_step']:8.2f} {limit:6d}")
            if args.by_op:
                print("    " + ", ".join(f"{k} {v}" for k, v in sorted(res["by_op"].items(), key=lambda kv: -kv[1])))
    return rows


if __name__ == "__main__":
    main()
