"""A LLaDA-MoE layer's MLP against a dense SwiGLU of the same active FLOPs, and the host reads of each.

The MoE MLP (router, top-k, the routed experts and the shared one: ``MoEBlock.ffn``) at LLaDA-MoE-7B-A1B's
layer shape (hidden 2048, 64 experts of 1024, top 8; ``--scale`` divides the widths for a small machine) is timed
against a dense SwiGLU whose hidden width is the active experts' (top-k x expert size, plus the shared expert), so
the ratio is what routing and dispatch cost over the same matrix work. Beside it, the dispatch this module had
before (``looped_*``: the experts' group sizes read on the host with ``bincount(...).tolist()``, then a Python loop
over the experts, each adding its weighted rows into the output; values equal to the grouped dispatch's within
float32 rounding, checked here). Host reads are counted by op (``dllm_bench.decoding.syncs``) on the accelerator's
code path.

Usage:  PYTHONPATH=. python scripts/bench_moe.py [--tokens 32 256 4096] [--scale 4] [--dtype float32]
Writes results/bench/moe_layer_<device>.csv.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dllm_bench.decoding.syncs import SyncCounter  # noqa: E402
from dllm_bench.models.host import accelerator_path  # noqa: E402
from dllm_bench.models.moe import MoEBlock, MoEConfig, SwiGLU  # noqa: E402

# LLaDA-MoE-7B-A1B's layer (inclusionAI's config.json: hidden 2048, 64 experts of 1024, top 8, no shared expert)
LAYER = {"hidden_size": 2048, "num_experts": 64, "num_experts_per_tok": 8, "expert_intermediate_size": 1024}


def moe_config(scale: int) -> MoEConfig:
    d, e = LAYER["hidden_size"] // scale, LAYER["expert_intermediate_size"] // scale
    return MoEConfig.from_hf_config({
        "architectures": ["LLaDAMoEModelLM"], "vocab_size": 64, "hidden_size": d, "num_hidden_layers": 1,
        "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": LAYER["num_experts"],
        "num_experts_per_tok": LAYER["num_experts_per_tok"], "expert_intermediate_size": e,
        "dense_intermediate_size": 4 * d, "moe_layer_freq": [1], "qk_layernorm": True, "rope_theta": 50000.0,
        "rms_norm_eps": 1e-5, "eos_token_id": 1,
    })


def looped_routed(block: MoEBlock, x: torch.Tensor) -> torch.Tensor:
    """The MoE MLP's routed part as this module dispatched before: group sizes on the host, one product per expert."""
    probs = F.softmax(block.gate(x), dim=1, dtype=torch.float)
    weights, chosen = torch.topk(probs, block.top_k, dim=-1)
    slots = chosen.t().reshape(-1)
    order = torch.argsort(slots, stable=True)
    tokens = torch.arange(x.shape[0], device=x.device).repeat(block.top_k)[order]
    pair_weights = weights.to(x.dtype).t().reshape(-1)[order]
    # two host reads a layer: bincount sizes its output from the data, and .tolist()
    counts = torch.bincount(slots, minlength=block.experts.num_experts).tolist()
    out, lo = torch.zeros_like(x), 0
    for e, count in enumerate(counts):
        if count:
            rows = tokens[lo:lo + count]
            out.index_add_(0, rows, block.experts.expert(e, x[rows]) * pair_weights[lo:lo + count, None])
        lo += count
    return out


def looped_ffn(block: MoEBlock, h: torch.Tensor) -> torch.Tensor:
    """``MoEBlock.ffn`` with the looped dispatch (LLaDA-MoE's layer has no shared expert and no expert bias)."""
    assert block.shared_expert is None and block.expert_bias is None
    x = block.ffn_norm(h)
    return looped_routed(block, x.reshape(-1, x.shape[-1])).view_as(x)


def timed(fn, x: torch.Tensor, repeats: int) -> float:
    """Median seconds of ``fn(x)`` over ``repeats`` calls after one warm-up."""
    fn(x)
    times = []
    for _ in range(repeats):
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
        t0 = time.perf_counter()
        fn(x)
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--scale", type=int, default=4, help="divide the layer's widths by this (1 = the real layer)")
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 256, 4096],
                    help="rows through the MLP (batch x canvas; 32: a cached step of one block)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    cfg = moe_config(args.scale)
    torch.manual_seed(0)
    moe = MoEBlock(cfg, 0).to(device, dtype).eval()
    active = cfg.num_experts_per_tok * cfg.expert_intermediate_size + (cfg.shared_expert_intermediate_size or 0)
    dense = SwiGLU(cfg.d_model, active).to(device, dtype).eval()
    rows = []
    with torch.no_grad():
        for n in args.tokens:
            x = torch.randn(1, n, cfg.d_model, device=device, dtype=dtype)
            with accelerator_path(), SyncCounter() as counted:
                grouped = moe.ffn(x)
            with accelerator_path(), SyncCounter() as counted_looped:
                looped = looped_ffn(moe, x)
            torch.testing.assert_close(looped, grouped)  # the same mixture, whichever dispatch
            moe_s, dense_s = timed(moe.ffn, x, args.repeats), timed(dense, x, args.repeats)
            looped_s = timed(lambda h: looped_ffn(moe, h), x, args.repeats)
            rows.append({"tokens": n, "d_model": cfg.d_model, "experts": cfg.num_experts,
                         "top_k": cfg.num_experts_per_tok, "expert_size": cfg.expert_intermediate_size,
                         "dense_hidden": active, "moe_ms": 1e3 * moe_s, "dense_ms": 1e3 * dense_s,
                         "moe_over_dense": moe_s / dense_s, "host_reads": counted.total,
                         "looped_ms": 1e3 * looped_s, "looped_over_dense": looped_s / dense_s,
                         "looped_host_reads": counted_looped.total,
                         "dtype": args.dtype, "threads": args.threads, "load": os.getloadavg()[0]})
            print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(out / f"moe_layer_{device.type}.csv", index=False)
    return frame


if __name__ == "__main__":
    main()
