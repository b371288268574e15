"""Where a decoding step's time goes outside the network, and what one Linear product costs in either order.

``steps``: one warmed-up decode of the bench's real-vocabulary shape (``scripts/bench.py``'s cpu-vocab model,
or ``--shape``; prompt 128 + answer 256, block 32) under the torch profiler; every operator's self time outside the network's
forwards, per step (the figures in docs/benchmarks.md, "Why the share stays above 5 %").
``linear``: ms per product of ``F.linear``, of W @ x.T with the transpose back (``cpu_linear.rows_product``, at any row
count) and of the network's ``Linear`` (which picks one of the two; median of ``--repeats`` calls) for weights out x
in at the given row counts (docs/benchmarks.md, "The product order").

Usage:  python scripts/profile_step.py steps --cache dual --rule threshold
        python scripts/profile_step.py linear --weight 126464x512 --weight 3072x1024 --rows 16 31 32
"""

from __future__ import annotations

import argparse
import bisect
import collections
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

from dllm_bench.decoding import DecodeSpec, Decoding, build_cache, build_policy, build_rule, generate  # noqa: E402
from dllm_bench.models.cpu_linear import Linear, rows_product  # noqa: E402


class MarkedNetwork(bench.TimedNetwork):
    """The bench's network wrapper with every forward marked for the profiler."""

    def __call__(self, input_ids, **kwargs):
        with record_function("network"):
            return super().__call__(input_ids, **kwargs)


def outside_network(cache: str, rule: str, answer: int, top: int, shape: str = "cpu-vocab") -> None:
    model = bench.build_model(shape, torch.device("cpu"), torch.float32)
    ids = bench._prompt(model, 1, 128)
    name, params = bench.VOCAB_RULES[rule]
    cache_name, cache_params = bench.CPU_CACHES[cache]
    spec = DecodeSpec(Decoding(answer, 32, build_policy("blocks"), build_rule(name, **params),
                               build_cache(cache_name, **cache_params)))
    net = MarkedNetwork(model)
    with torch.no_grad():
        generate(net, ids, None, spec)  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t = time.perf_counter()
            steps = generate(net, ids, None, spec).records[0].nfe
            wall = time.perf_counter() - t
    events = prof.events()
    spans = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == "network")
    starts = [s for s, _ in spans]

    def in_network(e) -> bool:
        i = bisect.bisect_right(starts, e.time_range.start) - 1
        return i >= 0 and e.time_range.start < spans[i][1]

    self_us, calls = collections.Counter(), collections.Counter()
    for e in events:
        if e.name != "network" and not in_network(e):
            self_us[e.name] += e.self_cpu_time_total
            calls[e.name] += 1
    network_ms = sum(e - s for s, e in spans) / 1e3 / steps
    step_ms = wall * 1e3 / steps
    print(f"{shape}, {cache}, {rule}: {steps} steps, {step_ms:.2f} ms a step (profiled), network {network_ms:.2f}, "
          f"outside {step_ms - network_ms:.2f} ms ({1 - network_ms / step_ms:.1%})")
    print(f"{'operator outside the network':44} {'ms/step':>8} {'calls/step':>10}")
    for op, us in self_us.most_common(top):
        print(f"{op:44} {us / 1e3 / steps:8.3f} {calls[op] / steps:10.1f}")
    rest = sum(self_us.values()) / 1e3 / steps
    print(f"{'(all operators)':44} {rest:8.3f}   the rest of 'outside' is Python")


def linear_products(weights: list[str], rows: list[int], repeats: int) -> None:
    def median_ms(fn, *args) -> float:
        fn(*args)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn(*args)
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e3

    print(f"{'weight':>14} {'rows':>5} {'F.linear ms':>12} {'W @ x.T ms':>11} {'Linear ms':>10} {'same bits':>9}")
    for spec in weights:
        out_features, in_features = (int(v) for v in spec.lower().split("x"))
        layer = Linear(in_features, out_features, bias=False).requires_grad_(False)
        torch.nn.init.normal_(layer.weight, std=0.02)
        for n in rows:
            x = torch.randn(n, in_features)
            same = torch.equal(layer(x), F.linear(x, layer.weight))
            print(f"{spec:>14} {n:5d} {median_ms(F.linear, x, layer.weight):12.2f} "
                  f"{median_ms(rows_product, x, layer.weight, None):11.2f} {median_ms(layer, x):10.2f} {str(same):>9}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    steps = sub.add_parser("steps", help="operators outside the network, per step")
    steps.add_argument("--cache", default="dual", choices=["none", "prefix", "dual"])
    steps.add_argument("--rule", default="threshold", choices=sorted(bench.VOCAB_RULES))
    steps.add_argument("--answer", type=int, default=256)
    steps.add_argument("--top", type=int, default=15)
    steps.add_argument("--shape", default="cpu-vocab", choices=sorted(bench.SHAPES))
    lin = sub.add_parser("linear", help="ms per product, F.linear against the network's Linear")
    lin.add_argument("--weight", action="append", default=None, help="out x in, e.g. 126464x512 (repeatable)")
    lin.add_argument("--rows", type=int, nargs="+", default=[16, 31, 32, 64])
    lin.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.what == "steps":
        outside_network(args.cache, args.rule, args.answer, args.top, args.shape)
    else:
        linear_products(args.weight or ["126464x512", "16384x1024", "3072x1024"], args.rows, args.repeats)


if __name__ == "__main__":
    main()
