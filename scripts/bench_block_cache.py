"""The committed-block K/V cache of a block-diffusion model against recomputing the canvas: time and FLOPs per step.

A random-weight block-causal network built from a real block-diffusion config.json (SDAR-8B-Chat's by default, or
Fast-dLLM v2 7B's: ``--config``) with its widths shrunk for the CPU, decoded by the block-diffusion policy
(``decoding/policies/block_diffusion.py``) with ``kv_cache=committed`` (finished blocks kept as K/V, one extra forward
writes each: SDAR's ``store_kv``, Fast-dLLM v2's ``update_past_key_values``) and with ``kv_cache=none`` (every step
recomputes the canvas up to the current block's end: LLaDA2.0's ``generate``). Both commit the same fixed count per
step (``steps`` per block, threshold 1 so the scheduled top-k always decides), so they decode the same tokens and
differ only in what each forward computes. FLOPs are counted as in ``scripts/bench.py``: the decode runs a second
time, untimed, under :func:`dllm_bench.models.flops.count_flops`. ``*_vs_none`` compare a row with the
``kv_cache=none`` row of its batch.

Usage:  PYTHONPATH=. python scripts/bench_block_cache.py [--config sdar fast_dllm_v2] [--batches 1 16]
Writes results/bench/block_cache_<device>.csv (machine metadata and the 1-minute load average on every row).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench import TimedNetwork, sync, write  # noqa: E402

from dllm_bench.decoding import DecodeSpec, Decoding, build_policy, generate  # noqa: E402
from dllm_bench.models.flops import count_flops  # noqa: E402
from dllm_bench.models.random_weights import random_network  # noqa: E402

CONFIGS = {"sdar": "sdar-8b-chat", "fast_dllm_v2": "fast-dllm-v2-7b"}
KV_MODES = ("none", "committed")  # the baseline first
# a small CPU shape (the 2-core build machine runs it in minutes): the real config's keys and tensor layout, these
# widths; the FLOP ratios depend on the shape and lengths, not on the machine
SHAPE = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=64, vocab_size=2048)


def build_model(name: str, block: int, device: torch.device, dtype: torch.dtype):
    """Random-weight network of a real block-diffusion config at ``SHAPE``, block size ``block``."""
    raw = json.loads((ROOT / "dllm_bench" / "models" / "reference_configs" / CONFIGS[name] / "config.json").read_text())
    vocab = SHAPE["vocab_size"]
    raw.update(SHAPE, mask_token_id=vocab - 1, eos_token_id=vocab - 2, pad_token_id=vocab - 2, bos_token_id=vocab - 3)
    raw["bd_size" if "bd_size" in raw else "block_size"] = block
    return random_network(raw, f"bench-{name}", device, dtype)


def decoding(kv_cache: str, answer: int, block: int, steps: int) -> Decoding:
    """Fixed count per step: ``steps`` per block, threshold 1 (no probability exceeds it: the top-k decides)."""
    return Decoding(answer, block, build_policy("block_diffusion", steps=steps, threshold=1.0, kv_cache=kv_cache))


def timed_decode(model, ids: torch.Tensor, answer: int, block: int, steps: int, kv_cache: str) -> dict:
    """One warmed-up timed decode and one counted decode; per-step and per-decode figures."""
    device = ids.device
    generate(TimedNetwork(model), ids[:, : block], None, DecodeSpec(decoding(kv_cache, block, block, steps)))
    net = TimedNetwork(model)
    sync(device)
    t = time.perf_counter()
    out = generate(net, ids, None, DecodeSpec(decoding(kv_cache, answer, block, steps)))
    sync(device)
    wall = time.perf_counter() - t
    counted = TimedNetwork(model, count=True)
    again, flops = count_flops(lambda: generate(counted, ids, None, DecodeSpec(decoding(kv_cache, answer, block, steps))))
    nfe = out.records[0].nfe
    if again.records[0].nfe != nfe or not torch.equal(again.tokens, out.tokens):
        raise RuntimeError(f"kv_cache {kv_cache}: the counted decode differs from the timed one")
    positions = sum(f[0] for f in net.forwards) * ids.shape[0]
    return dict(nfe=nfe, step_time_ms=round(wall / nfe * 1e3, 2), gflops_per_step=round(flops.total / nfe / 1e9, 4),
                decode_s=round(wall, 3), gflops_per_decode=round(flops.total / 1e9, 3),
                forward_positions=positions, tokens=out.tokens)


def bench(model, name: str, batches: list[int], prompt: int, answer: int, block: int, steps: int) -> pd.DataFrame:
    """Rows per batch and K/V mode, with the committed mode's ratios against recomputation."""
    rows = []
    g = torch.Generator().manual_seed(1)
    for batch in batches:
        ids = torch.randint(0, model.config.vocab_size - 8, (batch, prompt), generator=g).to(next(model.parameters()).device)
        group = {}
        for kv in KV_MODES:
            group[kv] = timed_decode(model, ids, answer, block, steps, kv)
            print(f"bench_block_cache: {name} batch {batch} kv_cache {kv}: {group[kv]['step_time_ms']} ms/step, "
                  f"{group[kv]['gflops_per_step']} GFLOP/step", flush=True)
        if not torch.equal(group["none"]["tokens"], group["committed"]["tokens"]):
            print(f"bench_block_cache: {name} batch {batch}: the two modes decoded different tokens (rounding near a tie)")
        base = group["none"]
        for kv, row in group.items():
            row = {k: v for k, v in row.items() if k != "tokens"}
            rows.append(dict(model=name, kv_cache=kv, batch=batch, prompt=prompt, answer=answer, block=block,
                             steps_per_block=steps, **row,
                             step_time_vs_none=round(row["step_time_ms"] / base["step_time_ms"], 4),
                             flop_ratio_vs_none=round(row["gflops_per_step"] / base["gflops_per_step"], 4),
                             decode_time_vs_none=round(row["decode_s"] / base["decode_s"], 4),
                             decode_flops_vs_none=round(row["gflops_per_decode"] / base["gflops_per_decode"], 4)))
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--config", nargs="+", default=["sdar"], choices=sorted(CONFIGS),
                    help="whose config.json the network is built from (SDAR: not shifted; Fast-dLLM v2: shifted)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--answer", type=int, default=64)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4, help="denoising steps per block (block / steps tokens a step)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    args = ap.parse_args()
    for name, value in (("--answer", args.answer), ("--prompt", args.prompt)):
        if value % args.block:
            ap.exit(2, f"bench_block_cache: {name} {value} is not a multiple of --block {args.block}\n")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    meta = dict(device=str(torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"),
                threads=args.threads, torch=torch.__version__, dtype=str(dtype).replace("torch.", ""),
                load_average_1m=round(os.getloadavg()[0], 2))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    frames = []
    with torch.no_grad():
        for name in args.config:
            model = build_model(name, args.block, device, dtype)
            frames.append(bench(model, name, args.batches, args.prompt, args.answer, args.block, args.steps))
    meta["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    shape = f"d{SHAPE['hidden_size']}-L{SHAPE['num_hidden_layers']}-V{SHAPE['vocab_size']}"
    write(pd.concat(frames, ignore_index=True), f"block_cache_{device.type}.csv", shape, meta, out)
    print(f"total {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
