"""Does compiling the confidence/commit step pay? Its two parts eager against ``torch.compile`` (inductor), on the CPU.

The step's work outside the network is (1) the confidence pass over the candidates' logits [N, V]
(``decoding/confidence.py``: the choice outside the mask id and its float64 softmax probability, the engine's
default) and (2) the rule's commit mask over [B, G] confidences (``decoding/commit_masks.py``: threshold 0.9 and
top-k 4). Each is timed eager and compiled (``fullgraph=True``: a graph break raises; the confidence pass with
``dynamic=True``, since N changes every step) at the shapes the benches meet: the tiny LLaDA (V 112, block 8,
answer 24), cpu-mid (V 16 384, block 32, answer 128) and cpu-vocab (V 126 464, block 32, answer 256), batch 1 and
16 where the scratch stays under a GB. Each time is the best of ``--rounds`` rounds of ``--repeats`` calls (the
uncontended cost on a shared machine). ``saved_us`` is eager minus compiled per call, one call a step; the bit
columns say whether the compiled result is the eager one bit for bit (the engine's tokens depend on it).

Usage:  PYTHONPATH=. python scripts/bench_commit_step.py [--threads 2]
Writes results/bench/compiled_commit_<device>.csv.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dllm_bench.decoding.commit_masks import threshold_commit_mask, topk_commit_mask  # noqa: E402
from dllm_bench.decoding.confidence import Workspace, _fast_top1, candidate_predictions  # noqa: E402
from dllm_bench.models.compiled import cpu_compiler_missing  # noqa: E402

# (shape, vocabulary, candidate rows N per step): a block's candidates at batch 1 and 16
CONFIDENCE_SHAPES = (("tiny", 112, 8), ("tiny", 112, 128), ("cpu-mid", 16384, 32), ("cpu-mid", 16384, 512),
                     ("cpu-vocab", 126464, 16), ("cpu-vocab", 126464, 32))
# (shape, batch, answer length G) of the commit masks
COMMIT_SHAPES = (("tiny", 1, 24), ("tiny", 16, 24), ("cpu-mid", 1, 128), ("cpu-mid", 16, 128),
                 ("cpu-vocab", 1, 256))
RULES = {"threshold": lambda c, m: threshold_commit_mask(c, m, 0.9), "topk": lambda c, m: topk_commit_mask(c, m, 4)}


def best_us(fn: Callable[[], object], repeats: int, rounds: int) -> float:
    """Best over ``rounds`` of the mean µs of ``repeats`` calls (after one warm-up call)."""
    fn()
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        out.append((time.perf_counter() - start) / repeats)
    return min(out) * 1e6


def confidence_rows(repeats: int, rounds: int) -> list[dict]:
    """The float64 top-1 confidence over [N, V] logits: the engine's call eager, the same function compiled."""
    rows = []
    for shape, vocab, n in CONFIDENCE_SHAPES:
        mask_id = vocab - 1  # never chosen, in the softmax's denominator (the published code's softmax)
        logits = torch.randn(n, vocab, generator=torch.Generator().manual_seed(n)) * 4
        logits[:, 0] += 8  # a peaked row, as a trained model's
        workspace = Workspace()

        def eager(logits=logits, mask_id=mask_id, workspace=workspace):
            return candidate_predictions(logits, None, unchosen_token_ids=[mask_id], workspace=workspace)
        compiled = torch.compile(lambda lg, m=mask_id: _fast_top1(lg, torch.float64, [], [m], None),
                                 dynamic=True, fullgraph=True)
        start = time.perf_counter()
        x0_c, conf_c = compiled(logits)
        compile_s = time.perf_counter() - start
        x0_e, conf_e = eager()
        eager_us = best_us(eager, repeats, rounds)
        compiled_us = best_us(lambda c=compiled, lg=logits: c(lg), repeats, rounds)
        rows.append(dict(part="confidence", shape=shape, vocab=vocab, rows=n, eager_us=round(eager_us, 1),
                         compiled_us=round(compiled_us, 1), saved_us=round(eager_us - compiled_us, 1),
                         speedup=round(eager_us / compiled_us, 3), compile_s=round(compile_s, 2),
                         choice_equal=bool(torch.equal(x0_c, x0_e)), bits_equal=bool(torch.equal(conf_c, conf_e)),
                         max_rel_diff=float(((conf_c - conf_e).abs() / conf_e).max())))
        print(rows[-1], flush=True)
    return rows


def commit_rows(repeats: int, rounds: int) -> list[dict]:
    """The commit masks over [B, G] float64 confidences (70 % of positions candidates) eager and compiled."""
    rows = []
    for rule, fn in RULES.items():
        compiled = torch.compile(fn, fullgraph=True)  # [B, G] is fixed within a decode
        for shape, batch, length in COMMIT_SHAPES:
            g = torch.Generator().manual_seed(batch * length)
            conf = torch.rand(batch, length, generator=g, dtype=torch.float64)
            cand = torch.rand(batch, length, generator=g) < 0.7
            start = time.perf_counter()
            mask_c = compiled(conf, cand)
            compile_s = time.perf_counter() - start
            eager_us = best_us(lambda c=conf, m=cand, f=fn: f(c, m), repeats, rounds)
            compiled_us = best_us(lambda c=conf, m=cand, f=compiled: f(c, m), repeats, rounds)
            same = bool(torch.equal(mask_c, fn(conf, cand)))
            rows.append(dict(part=f"commit_{rule}", shape=shape, vocab=None, rows=batch * length,
                             eager_us=round(eager_us, 1), compiled_us=round(compiled_us, 1),
                             saved_us=round(eager_us - compiled_us, 1), speedup=round(eager_us / compiled_us, 3),
                             compile_s=round(compile_s, 2), choice_equal=same, bits_equal=same, max_rel_diff=0.0))
            print(rows[-1], flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10, help="calls per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    args = ap.parse_args()
    if args.threads < 1 or args.repeats < 1 or args.rounds < 1:
        print(f"bench_commit_step: --threads, --repeats and --rounds must be >= 1, got {args.threads}, "
              f"{args.repeats}, {args.rounds}", file=sys.stderr)
        return 2
    missing = cpu_compiler_missing()
    if missing:
        print(f"bench_commit_step: {missing}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    load = os.getloadavg()[0]
    frame = pd.DataFrame(confidence_rows(args.repeats, args.rounds) + commit_rows(args.repeats, args.rounds))
    frame["threads"], frame["torch"] = args.threads, torch.__version__
    frame["device"] = platform.processor() or "cpu"
    frame["load_average_1m"], frame["load_average_1m_end"] = round(load, 2), round(os.getloadavg()[0], 2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "compiled_commit_cpu.csv", index=False)
    print(frame.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
