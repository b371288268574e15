"""Time the sandbox on the 164 canonical HumanEval solutions (all must pass), optionally against another checkout.

    python scripts/bench_sandbox.py --workers 8 --repeat 3 [--baseline-src /path/to/old/checkout]

With --baseline-src, rounds alternate between this checkout's sandbox and the other one's (its
`dllm_bench` imported from that directory in a subprocess), so both see the same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def programs() -> list[str]:
    """The 164 programs HumanEval scoring runs for the canonical solutions."""
    from dllm_bench.tasks import get_task

    task = get_task("humaneval")
    docs = task.docs()
    return [task.program(task.extract(d["canonical_solution"], d), d) for d in docs]


def one_round(workers: int, timeout_s: float) -> dict:
    """Run all 164 once; wall seconds, passes, and the isolation the sandbox reported."""
    from dllm_bench.tasks.sandbox import execute_many

    progs = programs()
    start = time.perf_counter()
    results = execute_many(progs, timeout_s, workers)
    wall = time.perf_counter() - start
    return {"wall_s": wall, "passed": sum(r.passed for r in results), "n": len(results),
            "isolation": sorted({r.isolation for r in results})}


def round_in(src: Path, workers: int, timeout_s: float) -> dict:
    """One round with the `dllm_bench` found in `src` (a subprocess, so the two versions never mix)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--one-round", "--workers", str(workers), "--timeout", str(timeout_s)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="a checkout (directory holding dllm_bench/) to time alongside this one")
    parser.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workers < 1 or args.repeat < 1:
        parser.error(f"--workers={args.workers} --repeat={args.repeat}: both must be >= 1")
    if args.one_round:
        print(json.dumps(one_round(args.workers, args.timeout)))
        return
    if args.baseline_src is not None and not (args.baseline_src / "dllm_bench").is_dir():
        parser.error(f"--baseline-src={args.baseline_src}: no dllm_bench/ package there")
    versions = {"this": ROOT} | ({"baseline": args.baseline_src.resolve()} if args.baseline_src else {})
    rounds: dict[str, list[dict]] = {name: [] for name in versions}
    for _ in range(args.repeat):
        for name, src in versions.items():
            rounds[name].append(round_in(src, args.workers, args.timeout))
    load = os.getloadavg()[0]
    print(f"164 canonical HumanEval solutions, {args.workers} workers, {args.repeat} rounds, load {load:.1f}")
    medians = {}
    for name, rs in rounds.items():
        medians[name] = statistics.median(r["wall_s"] for r in rs)
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in rs)
        print(f"  {name:8s} median {medians[name]:6.2f} s  (rounds {walls})  passed "
              f"{min(r['passed'] for r in rs)}/{rs[0]['n']}  isolation {rs[0]['isolation']}")
    if "baseline" in medians:
        print(f"  ratio this/baseline: {medians['this'] / medians['baseline']:.2f}")


if __name__ == "__main__":
    main()
