"""GPU check of the decoding engine at the real LLaDA-8B and Dream-7B shapes, random bf16 weights, nothing downloaded.

Per shape: per-forward latency of none/prefix/dual at answer 256/512, batch 1/8; ``generate`` tokens/s at batch
1, 8, 32 (threshold 0.9, dual cache); batched == alone token agreement in bf16 (left-padded prompts of different
lengths; bf16 kernels may differ by batch size, so this is a rate, not a pass/fail); which SDPA backends accept
the network's attention call and which one the default dispatch matches. Writes ``gpu_forward_<shape>.csv``,
``gpu_generate_<shape>.csv`` and ``gpu_summary.json`` under ``--out``; stops starting new work after
``--budget-s`` (default 420 s, to stay under 8 minutes on one GPU).

Usage:  python scripts/gpu_check.py                                   (cuda, both real shapes)
        python scripts/gpu_check.py --device cpu --tiny --out /tmp/g  (same code paths at a tiny shape, seconds)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from dllm_bench.decoding import DecodeSpec, Decoding, build_cache, build_policy, build_selector, generate
from dllm_bench.models import DiffusionLM, FeatureCache, KVCache
from dllm_bench.models.random_weights import random_network

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "dllm_bench" / "models" / "reference_configs"
SHAPES = {"llada-8b": CONFIGS / "llada-8b-instruct" / "config.json", "dream-7b": CONFIGS / "dream-v0-base-7b" / "config.json"}
TINY = {"hidden_size": 64, "d_model": 64, "num_hidden_layers": 2, "n_layers": 2, "num_attention_heads": 4, "n_heads": 4,
        "num_key_value_heads": 2, "n_kv_heads": 4, "intermediate_size": 128, "mlp_hidden_size": 128}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_model(shape: str, device: torch.device, dtype: torch.dtype, tiny: bool) -> DiffusionLM:
    """The real config's architecture (or its tiny version, same vocabulary) with random weights on the device."""
    raw = json.loads(SHAPES[shape].read_text())
    if tiny:
        raw.update({k: v for k, v in TINY.items() if k in raw})
    return random_network(raw, f"random-{shape}", device, dtype)


def timed(call, device: torch.device, repeats: int) -> float:
    """Seconds per call after one warm-up call (synchronised)."""
    call()
    sync(device)
    t = time.perf_counter()
    for _ in range(repeats):
        call()
    sync(device)
    return (time.perf_counter() - t) / repeats


def forward_latency(model: DiffusionLM, mode: str, batch: int, prompt: int, answer: int, block: int,
                    repeats: int) -> float:
    """Seconds per forward of one cache mode's steady-state step (cache filled; LM head on one block)."""
    device = model.device
    x = torch.randint(0, model.config.vocab_size - 1000, (batch, prompt + answer), device=device)
    s, e = prompt, prompt + block
    with torch.no_grad():
        if mode == "none":
            return timed(lambda: model(x, logits_range=(s, e)), device, repeats)
        if mode in ("prefix", "dual"):
            kv = KVCache()
            model(x, cache=kv, logits_range=(s, e))
            end = x.shape[1] if mode == "prefix" else e
            return timed(lambda: model(x[:, s:end], cache=kv, start=s, logits_range=(s, e)), device, repeats)
        fc = FeatureCache(prompt_length=prompt)
        fc.plan(True, True, 0.0)
        model(x, cache=fc, logits_range=(s, e))
        fc.plan(False, False, 0.25)
        return timed(lambda: model(x, cache=fc, logits_range=(s, e)), device, repeats)


def padded_prompts(model: DiffusionLM, lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded random prompts of the given lengths and their attention mask."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), model.config.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, width - n:] = torch.randint(0, model.config.vocab_size - 1000, (n,), generator=g)
        mask[i, width - n:] = 1
    return ids.to(model.device), mask.to(model.device)


def decode(model: DiffusionLM, ids: torch.Tensor, mask: torch.Tensor, gen: int, block: int):
    spec = DecodeSpec(Decoding(gen, block, build_policy("blocks"), build_selector("threshold", tau=0.9),
                               build_cache("dual")))
    return generate(model, ids, mask, spec)


def generate_speed(model: DiffusionLM, batch: int, prompt: int, gen: int, block: int) -> dict:
    """Tokens/s of ``generate`` (threshold 0.9, dual cache) at one batch size, after a warm-up decode."""
    ids, mask = padded_prompts(model, [prompt] * batch, seed=batch)
    with torch.no_grad():
        decode(model, ids[:, : prompt // 2], mask[:, : prompt // 2], block, block)
        sync(model.device)
        t = time.perf_counter()
        out = decode(model, ids, mask, gen, block)
        sync(model.device)
    wall = time.perf_counter() - t
    nfe = max(r.nfe for r in out.records)
    return dict(batch=batch, prompt=prompt, answer=gen, block=block, wall_s=round(wall, 3), nfe=nfe,
                tokens_per_s=round(batch * gen / wall, 1), ms_per_step=round(wall / nfe * 1e3, 2))


def batch_agreement(model: DiffusionLM, lengths: list[int], gen: int, block: int) -> float:
    """Share of answer tokens equal between one left-padded batched decode and each prompt decoded alone."""
    ids, mask = padded_prompts(model, lengths, seed=7)
    with torch.no_grad():
        batched = decode(model, ids, mask, gen, block).tokens
        same = 0
        for i, n in enumerate(lengths):
            alone = decode(model, ids[i:i + 1, -n:], mask[i:i + 1, -n:], gen, block).tokens
            same += int((alone[0] == batched[i]).sum())
    return same / (len(lengths) * gen)


def sdpa_backends(model: DiffusionLM, batch: int, length: int) -> dict:
    """SDPA backends that accept the network's attention call (bool key mask, its head shapes), with their time,
    and the one whose output the default dispatch reproduces exactly."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg, device, dtype = model.config, model.device, model.dtype
    q = torch.randn(batch, cfg.n_heads, length, cfg.head_dim, device=device, dtype=dtype)
    k = torch.randn(batch, cfg.n_kv_heads, length, cfg.head_dim, device=device, dtype=dtype)
    v = torch.randn_like(k)
    mask = torch.ones(batch, 1, 1, length, dtype=torch.bool, device=device)
    gqa = cfg.n_kv_heads != cfg.n_heads

    def call():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    default = call()
    accepted, matches = {}, []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.MATH):
        try:
            with sdpa_kernel([backend]):
                out = call()
                accepted[backend.name] = round(timed(call, device, 5) * 1e3, 3)
        except RuntimeError:
            continue
        if torch.equal(out, default):
            matches.append(backend.name)
    return {"accepted_ms": accepted, "default_matches": matches,
            "default_ms": round(timed(call, device, 5) * 1e3, 3)}


def check_shape(shape: str, args, device: torch.device, deadline: float, out: Path) -> dict:
    """Every measurement for one shape; skips what would start after the deadline (recorded as skipped)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    t0 = time.perf_counter()
    model = build_model(shape, device, dtype, args.tiny)
    if device.type == "cuda":  # the peak below is the checks' (weights included), not the float32 build's
        torch.cuda.reset_peak_memory_stats(device)
    summary = {"shape": shape, "parameters": model.num_parameters(), "dtype": str(dtype).replace("torch.", ""),
               "build_s": round(time.perf_counter() - t0, 1), "skipped": []}
    rows = []
    for answer in args.answers:
        for batch in args.forward_batches:
            for mode in ("none", "prefix", "dual", "dllm"):
                if time.perf_counter() > deadline:
                    summary["skipped"].append(f"forward {mode} answer {answer} batch {batch}")
                    continue
                sec = forward_latency(model, mode, batch, args.prompt, answer, args.block, args.repeats)
                rows.append(dict(shape=shape, cache=mode, batch=batch, prompt=args.prompt, answer=answer,
                                 block=args.block, forward_ms=round(sec * 1e3, 3)))
    pd.DataFrame(rows).to_csv(out / f"gpu_forward_{shape}.csv", index=False)
    gen_rows = []
    for batch in args.generate_batches:
        if time.perf_counter() > deadline:
            summary["skipped"].append(f"generate batch {batch}")
            continue
        gen_rows.append(dict(shape=shape, **generate_speed(model, batch, args.prompt, args.gen, args.block)))
    pd.DataFrame(gen_rows).to_csv(out / f"gpu_generate_{shape}.csv", index=False)
    if time.perf_counter() < deadline:
        lengths = [args.prompt - 7 * i for i in range(args.agreement_rows)]
        summary["batched_vs_alone_token_agreement"] = round(batch_agreement(model, lengths, args.gen, args.block), 4)
        summary["sdpa"] = sdpa_backends(model, args.forward_batches[-1], args.prompt + args.answers[-1])
    else:
        summary["skipped"] += ["batched vs alone agreement", "sdpa backends"]
    summary["forward"], summary["generate"] = rows, gen_rows
    del model
    if device.type == "cuda":
        summary["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    return summary


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shapes", nargs="+", default=sorted(SHAPES), choices=sorted(SHAPES))
    ap.add_argument("--tiny", action="store_true", help="tiny layers, real vocabulary (the CPU test of these paths)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--answers", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--forward-batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--generate-batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--gen", type=int, default=256, help="answer length of the generate runs")
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--agreement-rows", type=int, default=8)
    args = ap.parse_args(argv)
    if args.prompt - 7 * (args.agreement_rows - 1) < 1:
        raise SystemExit(f"--prompt {args.prompt} is too short for {args.agreement_rows} agreement rows "
                         f"(each 7 ids shorter); use --prompt >= {7 * args.agreement_rows - 6}")
    device = torch.device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    deadline = start + args.budget_s
    summary = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "tiny": args.tiny, "budget_s": args.budget_s, "shapes": []}
    for i, shape in enumerate(args.shapes):
        share = start + args.budget_s * (i + 1) / len(args.shapes)  # each shape gets its part of the budget
        summary["shapes"].append(check_shape(shape, args, device, min(share, deadline), out))
    summary["total_s"] = round(time.perf_counter() - start, 1)
    (out / "gpu_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    for s in summary["shapes"]:
        print(f"{s['shape']}: agreement {s.get('batched_vs_alone_token_agreement')}, sdpa {s.get('sdpa')}, "
              f"skipped {s['skipped']}")
        print(pd.DataFrame(s["forward"]).to_string(index=False))
        print(pd.DataFrame(s["generate"]).to_string(index=False))
    print(f"total {summary['total_s']}s -> {out}")
    return summary


if __name__ == "__main__":
    main()
