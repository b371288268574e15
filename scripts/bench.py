"""Decoding-engine benchmarks: rule cost, per-step time by cache mode, per-forward latency (GPU shapes).

CPU default (``make bench``): a mid-size random LLaDA-shaped model (d_model 1024, 8 layers, vocab 16k), prompt 256
+ answer 128, block 32, every cache preset of conf/cache/ (a new cache's YAML joins without code) through the real
``generate`` loop with fixed steps; then the real-vocabulary shape (d_model 512, 4 layers, LLaDA's 126 464 ids),
prompt 128 + answer 256, threshold 0.9 and Fréchet 0.25 with none/prefix/dual; writes results/bench/*.csv.
The FLOP model: each decode is run a second time, untimed, under :func:`dllm_bench.models.flops.count_flops`, which
counts every product it computes (query rows x key length per layer, projection and MLP rows, LM head rows, a
cache's own products); ``flop_ratio_vs_none`` is its FLOPs per step over the no-cache decode's and
``step_time_over_flop_ratio`` its step time against no cache over that ratio (1 = time follows FLOPs).
The machine's limit, measured in the same run: ``matmul_peak`` times dense products at the network's own widths
(and one large square product) and keeps the best rate; every step row gives its achieved FLOP/s
(``achieved_gflops``: counted FLOPs per step over the step time) and ``fraction_of_peak`` against it. cpu-mid runs
at batch 1 for every cache preset (``--batch1-caches``) and at batch 16 for ``--batch-caches`` (none, prefix, dual);
``--update`` replaces only the rows it measured in the existing CSV.
``--device cuda --shape llada-8b``: the real LLaDA-8B shapes with random bf16 weights, per-forward latency per
cache mode at answer lengths 256/512/1024, batch 1 and 8.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import pandas as pd
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, build_cache, build_policy, build_rule, generate
from dllm_bench.decoding.commit_masks import (
    factor_commit_mask,
    frechet_commit_mask,
    threshold_commit_mask,
    topk_commit_mask,
)
from dllm_bench.models import DiffusionLM, FeatureCache, KVCache, cpu_linear
from dllm_bench.models.flops import count_flops
from dllm_bench.models.random_weights import random_network
from dllm_bench.runner.group_defaults import option_values

ROOT = Path(__file__).resolve().parent.parent
CACHE_CONF = ROOT / "conf" / "cache"
LLADA_CONFIG = ROOT / "dllm_bench" / "models" / "reference_configs" / "llada-8b-instruct" / "config.json"
SHAPES = {
    # d_model, n_layers, n_heads, mlp_hidden, vocab
    "cpu-mid": dict(d_model=1024, n_layers=8, n_heads=16, n_kv_heads=16, mlp_hidden_size=3072, embedding_size=16384),
    "cpu-vocab": dict(d_model=512, n_layers=4, n_heads=4, n_kv_heads=4, mlp_hidden_size=1536, embedding_size=126464),
    "llada-8b": dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, mlp_hidden_size=12288, embedding_size=126464),
    "tiny": dict(d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, mlp_hidden_size=256, embedding_size=512),
}


LINEAR_PRODUCTS = ("auto", "f_linear")
DEFAULT_WX_MIN_ROWS = cpu_linear.WX_MIN_ROWS


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def use_linear_product(name: str) -> None:
    """'auto': the network's Linear (W @ x.T at ``cpu_linear.WX_MIN_ROWS``-``WX_MAX_ROWS`` rows on the CPU); 'f_linear':
    F.linear for every product, the A/B baseline (same bits from 12 rows up, tests/models/test_linear.py)."""
    if name not in LINEAR_PRODUCTS:
        raise ValueError(f"linear product {name!r} is not one of {LINEAR_PRODUCTS}")
    cpu_linear.WX_MIN_ROWS = DEFAULT_WX_MIN_ROWS if name == "auto" else 2**62


def build_model(shape: str, device: torch.device, dtype: torch.dtype) -> DiffusionLM:
    """Random-weight LLaDA-shaped network (real 8B config keys, sizes from ``SHAPES``)."""
    raw = json.loads(LLADA_CONFIG.read_text())
    sizes = SHAPES[shape]
    vocab = sizes["embedding_size"]
    raw.update(sizes, vocab_size=vocab)
    if vocab < 126464:  # keep the special ids inside a smaller vocabulary
        raw.update(mask_token_id=vocab - 1, eos_token_id=vocab - 2, pad_token_id=vocab - 2, bos_token_id=vocab - 3)
    return random_network(raw, f"random-{shape}", device, dtype)


class TimedNetwork:
    """Wraps the network to time every forward (synchronised) and remember its shape."""

    accepts_logits_range = True
    accepts_logits_at = True

    def __init__(self, model: DiffusionLM, count: bool = False):
        self.model, self.config, self.count = model, model.config, count
        # (queries, keys, LM-head positions, seconds, counted FLOPs of the call or None when not counting)
        self.forwards: list[tuple[int, int, int, float, int | None]] = []

    def __call__(self, input_ids, **kwargs):
        sync(input_ids.device)
        t = time.perf_counter()
        if self.count:
            out, flops = count_flops(lambda: self.model(input_ids, **kwargs))
        else:
            out, flops = self.model(input_ids, **kwargs), None
        sync(input_ids.device)
        mask = kwargs.get("attention_mask")
        keys = mask.shape[1] if mask is not None else input_ids.shape[1]
        head = out.shape[1]
        if out.dim() == 2:  # logits_at: [n, V], the head ran on n rows padded to head_min_rows
            head = max(out.shape[0], self.model.head_min_rows) if out.shape[0] else 0
        self.forwards.append((input_ids.shape[1], keys, head, time.perf_counter() - t,
                              None if flops is None else flops.total))
        return out

    def __getattr__(self, name: str):  # what a session reads of the model itself (d2Cache: its head and norm)
        return getattr(self.model, name)


def bench_rules(repeats: int) -> pd.DataFrame:
    """Cost per call of each commit rule on random confidence profiles."""
    rules = {
        "topk": lambda c, m: topk_commit_mask(c, m, 4),
        "threshold": lambda c, m: threshold_commit_mask(c, m, 0.9),
        "factor": lambda c, m: factor_commit_mask(c, m, 1.0),
        "factor_compat": lambda c, m: factor_commit_mask(c, m, 1.0, compat=True),
        "frechet": lambda c, m: frechet_commit_mask(c, m, 0.25),
    }
    rows = []
    g = torch.Generator().manual_seed(0)
    for batch in (1, 8):
        for length in (32, 256):
            conf = torch.rand(batch, length, generator=g, dtype=torch.float64)
            cand = torch.rand(batch, length, generator=g) < 0.7
            for name, rule in rules.items():
                rule(conf, cand)
                rounds = []
                for _ in range(10):  # best of 10 rounds: the uncontended cost on a shared machine
                    t = time.perf_counter()
                    for _ in range(repeats):
                        rule(conf, cand)
                    rounds.append((time.perf_counter() - t) / repeats)
                us = min(rounds) * 1e6
                rows.append(dict(rule=name, batch=batch, candidates_window=length, us_per_call=round(us, 2)))
    return pd.DataFrame(rows)


# the bench's own settings of a preset (dLLM-Cache: its LLaDA-Instruct GSM8K intervals); every other preset as shipped
BENCH_PARAMS = {"dllm": {"prompt_interval": 50, "response_interval": 7, "verify_ratio": 0.25}}


def cache_presets(conf_dir: Path = CACHE_CONF) -> dict[str, tuple[str, dict]]:
    """Every cache preset of conf/cache/ as {file stem: (cache name, parameters)}, no cache first: a cache joins
    the bench by its YAML alone."""
    presets = {}
    first = ("none", "prefix", "dual", "dllm")  # the earlier CSVs' rows, then the rest by name
    for path in sorted(conf_dir.glob("*.yaml"), key=lambda p: (first.index(p.stem) if p.stem in first else 4, p.stem)):
        params = option_values(path)  # as composed: the cache's defaults, then the file's own values
        name = params.pop("name", path.stem)
        presets[path.stem] = (name, {**params, **BENCH_PARAMS.get(path.stem, {})})
    return presets


CPU_CACHES = cache_presets()
FIXED_COUNT_RULES = ("topk", "random_order")  # the same steps per block: the caches' step times compare
# the real-vocabulary shape runs the adaptive rules of the paper tables
VOCAB_RULES = {"threshold": ("threshold", {"threshold": 0.9}), "frechet": ("frechet", {"delta": 0.25})}


def matmul_peak(device: torch.device, dtype: torch.dtype, widths: tuple[int, ...], seconds: float = 1.0) -> dict:
    """The best dense-product rate this machine reaches now, in GFLOP/s: [rows, k] @ [k, n] at every pair of the
    network's ``widths`` (rows 2048) and one 2048-cube, each repeated for about ``seconds``; best per-call rate."""
    shapes = sorted({(2048, k, n) for k in widths for n in widths} | {(2048, 2048, 2048)})
    best, best_shape = 0.0, None
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        a @ b
        sync(device)
        start = time.perf_counter()
        while True:
            t = time.perf_counter()
            a @ b
            sync(device)
            now = time.perf_counter()
            rate = 2 * m * k * n / (now - t) / 1e9
            if rate > best:
                best, best_shape = rate, (m, k, n)
            if now - start > seconds / len(shapes) * 4:
                break
    return {"peak_gflops": round(best, 2), "peak_shape": "x".join(map(str, best_shape))}


def with_peak(frame: pd.DataFrame, peak: dict) -> pd.DataFrame:
    """Each row's achieved FLOP/s (counted FLOPs per step over the step time) and its fraction of the peak."""
    frame["achieved_gflops"] = (frame["gflops_per_step"] / (frame["step_time_ms"] / 1e3)).round(2)
    frame["fraction_of_peak"] = (frame["achieved_gflops"] / peak["peak_gflops"]).round(4)
    for k, v in peak.items():
        frame[k] = v
    return frame


def step_row(net: TimedNetwork, wall: float, nfe: int, canvas: int, counted: TimedNetwork, flops: int) -> dict:
    """Per-step figures of one timed decode: step time, min full/cached forward, outside-network share, the
    counted FLOPs per step (``flops``: the whole decode, counted in the untimed pass ``counted``) and the cached
    forward's cost per FLOP against the full forward's (1 = a cached FLOP costs what a full one does)."""
    inside = sum(f[3] for f in net.forwards)
    full = [f for f in net.forwards if f[0] == canvas]
    cached = [f for f in net.forwards if f[0] < canvas]
    full_flops = [f[4] for f in counted.forwards if f[0] == canvas]
    cached_flops = [f[4] for f in counted.forwards if f[0] < canvas]

    def per_flop(fs, counts):
        return min(f[3] for f in fs) / (sum(counts) / len(counts)) if fs and counts else float("nan")

    flop_ratio = (sum(cached_flops) / len(cached_flops) / (sum(full_flops) / len(full_flops))
                  if cached_flops and full_flops else float("nan"))
    return dict(
        steps=nfe, step_time_ms=round(wall / nfe * 1e3, 2), gflops_per_step=round(flops / nfe / 1e9, 4),
        full_forward_ms=round(min(f[3] for f in full) * 1e3, 2) if full else float("nan"),
        cached_forward_ms=round(min(f[3] for f in cached) * 1e3, 2) if cached else float("nan"),
        outside_network_ms_per_step=round((wall - inside) / nfe * 1e3, 3),
        outside_network_fraction=round(1 - inside / wall, 4),
        cached_flop_ratio=round(flop_ratio, 4),
        time_over_flop_ratio=(round(per_flop(cached, cached_flops) / per_flop(full, full_flops), 3)
                              if cached and full else float("nan")),
    )


def timed_decode(model: DiffusionLM, ids: torch.Tensor, answer: int, block: int, policy, rule,
                 cache: tuple[str, dict]) -> dict:
    """One warmed-up decode through ``generate`` with every forward timed; returns :func:`step_row`."""
    device = ids.device
    net = TimedNetwork(model)
    name, params = cache
    # one block of the same rule and cache (a fixed-count rule in 2 steps)
    warmup = Decoding(block, block, build_policy("blocks", **({} if rule.adaptive else {"steps": 2})), rule,
                      build_cache(name, **params))
    generate(net, ids[:, :16], None, DecodeSpec(warmup))
    net.forwards.clear()
    sync(device)
    t = time.perf_counter()
    out = generate(net, ids, None, DecodeSpec(Decoding(answer, block, policy, rule, build_cache(name, **params))))
    sync(device)
    wall = time.perf_counter() - t
    counted = TimedNetwork(model, count=True)
    again, flops = count_flops(lambda: generate(counted, ids, None, DecodeSpec(
        Decoding(answer, block, policy, rule, build_cache(name, **params)))))
    if again.records[0].nfe != out.records[0].nfe:
        raise RuntimeError(f"cache {name}: the counted decode took {again.records[0].nfe} steps, the timed one "
                           f"{out.records[0].nfe}")
    return step_row(net, wall, out.records[0].nfe, ids.shape[1] + answer, counted, flops.total)


def runs_here(cache: tuple[str, dict], policy, rule, answer: int, block: int) -> str | None:
    """Why a preset cannot run with this policy and rule on the LLaDA-shaped network (None: it can)."""
    name, params = cache
    built = build_cache(name, **params)
    try:
        built.check_flavour("llada", policy.name)
        built.check_combination(policy=policy, rule=rule, gen_length=answer, block_length=block)
    except ValueError as err:
        return str(err)
    return None


def _prompt(model: DiffusionLM, batch: int, prompt: int) -> torch.Tensor:
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, model.config.vocab_size - 8, (batch, prompt), generator=g).to(device)


def bench_generate(model: DiffusionLM, batch: int, prompt: int, answer: int, block: int, steps: int,
                   caches: dict[str, tuple[str, dict]] | None = None) -> pd.DataFrame:
    """Per-step time by cache preset (default: every one of conf/cache/ that runs with fixed-step top-k on LLaDA)
    through ``generate`` (fixed-step top-k, so every mode does the same steps).

    Forward times are the minimum over the run's forwards (the uncontended cost on a shared machine); the step
    time is the mean and the outside-network fraction compares time inside and outside forwards of one run.
    """
    ids = _prompt(model, batch, prompt)
    rows = []
    for mode, cache in (caches or CPU_CACHES).items():
        policy = build_policy("blocks", steps=steps)
        # top-k, or the other fixed-count rule where a cache needs it (dKV-Cache-Greedy: its drawn order)
        for rule_name in FIXED_COUNT_RULES:
            rule = build_rule(rule_name)
            why = runs_here(cache, policy, rule, answer, block)
            if why is None:
                break
        if why is not None:
            print(f"bench: preset {mode} left out: {why}")
            continue
        row = timed_decode(model, ids, answer, block, policy, rule, cache)
        rows.append(dict(cache=mode, rule=rule_name, batch=batch, prompt=prompt, answer=answer, block=block, **row))
    return pd.DataFrame(_versus_none(rows))


def bench_vocab(model: DiffusionLM, prompt: int, answer: int, block: int, caches: tuple[str, ...]) -> pd.DataFrame:
    """The real-vocabulary shape: threshold 0.9 and Fréchet 0.25 (adaptive, until each block is full) per cache."""
    ids = _prompt(model, 1, prompt)
    rows = []
    for rule, (name, params) in VOCAB_RULES.items():
        group = []
        for mode in caches:
            row = timed_decode(model, ids, answer, block, build_policy("blocks"), build_rule(name, **params),
                               CPU_CACHES[mode])
            group.append(dict(cache=mode, rule=rule, batch=1, prompt=prompt, answer=answer, block=block, **row))
        rows += _versus_none(group)
    return pd.DataFrame(rows)


def _versus_none(rows: list[dict]) -> list[dict]:
    """Adds each row's step time and FLOPs per step against the first row's (no cache), and the time ratio over
    the FLOP ratio (1 = the step time follows the FLOPs; above 1 = the cache's FLOPs cost more than a full
    forward's, as dual's small forwards do)."""
    base, base_flops = rows[0]["step_time_ms"], rows[0]["gflops_per_step"]
    for r in rows:
        r["step_time_vs_none"] = round(r["step_time_ms"] / base, 4)
        r["flop_ratio_vs_none"] = round(r["gflops_per_step"] / base_flops, 4)
        r["step_time_over_flop_ratio"] = round(r["step_time_vs_none"] / r["flop_ratio_vs_none"], 3)
    return rows


def forward_latency(model: DiffusionLM, mode: str, batch: int, prompt: int, answer: int, block: int,
                    repeats: int) -> float:
    """Seconds per forward of one cache mode's steady-state step (cache already filled)."""
    cfg = model.config
    device = next(model.parameters()).device
    x = torch.randint(0, cfg.vocab_size - 8, (batch, prompt + answer), device=device)
    s, e = prompt, prompt + block
    with torch.no_grad():
        if mode == "none":
            def call():
                return model(x)
        elif mode in ("prefix", "dual"):
            kv = KVCache()
            model(x, cache=kv)
            end = x.shape[1] if mode == "prefix" else e

            def call():
                return model(x[:, s:end], cache=kv, start=s)
        else:
            fc = FeatureCache(prompt_length=prompt)
            fc.plan(True, True, 0.0)
            model(x, cache=fc)
            fc.plan(False, False, 0.25)

            def call():
                return model(x, cache=fc)
        call()
        sync(device)
        t = time.perf_counter()
        for _ in range(repeats):
            call()
        sync(device)
    return (time.perf_counter() - t) / repeats


def bench_forward_latency(model: DiffusionLM, prompt: int, answers: list[int], batches: list[int], block: int,
                          repeats: int, deadline: float) -> pd.DataFrame:
    rows = []
    for answer in answers:
        for batch in batches:
            for mode in ("none", "prefix", "dual", "dllm"):
                if time.perf_counter() > deadline:
                    return pd.DataFrame(rows)
                sec = forward_latency(model, mode, batch, prompt, answer, block, repeats)
                rows.append(dict(cache=mode, batch=batch, prompt=prompt, answer=answer, block=block,
                                 forward_ms=round(sec * 1e3, 3)))
    return pd.DataFrame(rows)


ROW_KEY = ["cache", "rule", "batch"]


def write(frame: pd.DataFrame, name: str, shape: str, meta: dict, out: Path, update: bool = False) -> None:
    """CSV with the shape and the machine's metadata on every row; printed too. ``update``: the rows measured
    replace those of the same cache, rule and batch in the existing CSV, whose other rows stay."""
    frame["shape"] = shape
    for k, v in meta.items():
        frame[k] = v
    if update and (out / name).exists():
        old = pd.read_csv(out / name)
        measured = pd.MultiIndex.from_frame(frame[ROW_KEY])
        old = old[~pd.MultiIndex.from_frame(old[ROW_KEY]).isin(measured)]
        frame = pd.concat([old, frame], ignore_index=True)
        order = {name: n for n, name in enumerate(CPU_CACHES)}  # within a batch, the presets' order (none first)
        frame = frame.sort_values(["batch", "cache"], key=lambda c: c.map(order) if c.name == "cache" else c,
                                  kind="stable", ignore_index=True)
    frame.to_csv(out / name, index=False)
    print(frame.to_string(index=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default=None, choices=sorted(SHAPES), help="default: cpu-mid on cpu, llada-8b on cuda")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=None)
    ap.add_argument("--answer", type=int, default=128)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16], help="cpu-mid batch sizes")
    ap.add_argument("--batch-caches", nargs="+", default=["none", "prefix", "dual"],
                    help="cache presets timed at the batches above 1")
    ap.add_argument("--batch1-caches", nargs="+", default=None,
                    help="cache presets timed at batch 1 (default every preset of conf/cache/; none first)")
    ap.add_argument("--update", action="store_true",
                    help="replace the measured rows in the existing cpu-mid CSV, keep its other rows")
    ap.add_argument("--skip-rules", action="store_true", help="leave out the rule-cost table (rules_<device>.csv)")
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--vocab-prompt", type=int, default=128, help="real-vocabulary shape: prompt length")
    ap.add_argument("--vocab-answer", type=int, default=256, help="real-vocabulary shape: answer length")
    ap.add_argument("--skip-vocab", action="store_true", help="leave out the real-vocabulary shape")
    ap.add_argument("--rules-only", action="store_true", help="only the rule-cost table")
    ap.add_argument("--budget-s", type=float, default=280.0, help="stop the latency sweep after this long")
    ap.add_argument("--linear-product", default="auto", choices=LINEAR_PRODUCTS,
                    help="auto: the network's Linear (W @ x.T at 16-512 rows on the CPU); f_linear: F.linear "
                         "everywhere (the A/B baseline)")
    args = ap.parse_args()
    for flag, names in (("--batch-caches", args.batch_caches), ("--batch1-caches", args.batch1_caches or ["none"])):
        unknown = [n for n in names if n not in CPU_CACHES]
        if unknown or names[0] != "none":
            ap.error(f"{flag} {' '.join(names)}: the first must be none (the rows' reference) and each one of "
                     f"{', '.join(CPU_CACHES)}")
    if args.skip_rules and args.rules_only:
        ap.error("--skip-rules and --rules-only leave nothing to run")
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    shape = args.shape or ("llada-8b" if device.type == "cuda" else "cpu-mid")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tag = f"{device.type}_{shape}"
    meta = dict(device=str(torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"),
                threads=args.threads, torch=torch.__version__, dtype=str(dtype).replace("torch.", ""),
                linear_product=args.linear_product, load_average_1m=round(os.getloadavg()[0], 2))

    if not args.skip_rules:
        sel = bench_rules(repeats=20)
        for k, v in meta.items():
            sel[k] = v
        sel.to_csv(out / f"rules_{device.type}.csv", index=False)
        print(sel.to_string(index=False))
    if args.rules_only:
        return

    use_linear_product(args.linear_product)
    model = build_model(shape, device, dtype)
    if device.type == "cpu":
        prompt = args.prompt or 256
        steps = (args.answer // args.block) * 4
        widths = (model.config.d_model, model.config.mlp_hidden_size)
        with torch.no_grad():
            peak = matmul_peak(device, dtype, widths)
            print(f"bench: matrix-product peak {peak['peak_gflops']} GFLOP/s ({peak['peak_shape']})")
            frames = []
            for batch in args.batches:
                names = args.batch1_caches if batch == 1 else args.batch_caches
                caches = None if names is None else {m: CPU_CACHES[m] for m in names}
                frames.append(bench_generate(model, batch, prompt, args.answer, args.block, steps, caches))
        write(with_peak(pd.concat(frames, ignore_index=True), peak), f"cache_steps_{tag}.csv", shape, meta, out,
              args.update)
        if not args.skip_vocab:
            del model
            vocab = build_model("cpu-vocab", device, dtype)
            with torch.no_grad():
                peak = matmul_peak(device, dtype, (vocab.config.d_model, vocab.config.mlp_hidden_size))
                steps = bench_vocab(vocab, args.vocab_prompt, args.vocab_answer, args.block, ("none", "prefix", "dual"))
            write(with_peak(steps, peak), f"cache_steps_{device.type}_cpu-vocab.csv", "cpu-vocab", meta, out)
    else:
        prompt = args.prompt or 512
        lat = bench_forward_latency(model, prompt, [256, 512, 1024], [1, 8], args.block, repeats=5,
                                    deadline=start + args.budget_s)
        lat["shape"] = shape
        for k, v in meta.items():
            lat[k] = v
        lat.to_csv(out / f"forward_latency_{tag}.csv", index=False)
        print(lat.to_string(index=False))
    print(f"total {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
