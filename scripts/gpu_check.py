"""GPU check of the decoding engine at the real LLaDA-8B and Dream-7B shapes and an assumed LLaDA-MoE-7B-A1B shape
(random weights, nothing downloaded), and of the shipped tiny checkpoints' tokens against the CPU's.

Phases in order — LLaDA-8B, Dream-7B, the LLaDA-MoE shape, then the tiny checkpoints — each with its own share of
``--budget-s`` counted from its own start (what a phase leaves passes on, so a slow phase never starves the 8B
ones); a step that would start after its phase's deadline is skipped, and one running past it stops at its next
forward (the network raises ``DeadlineReached``), both recorded in the summary, which is rewritten after each phase.
Per shape:
per-forward latency of none/prefix/dual/dllm with the decoder's attention mask (a padded batch's) and without it
(what an unpadded batch sends), with the peak memory of each; the SDPA backend per attention shape (full canvas,
a prefix step's answer queries, a dual step's T = block queries; with and without a mask): which backends accept
the call (``sdpa_kernel`` with each alone) and which one the default dispatch runs (the profiler's op name);
``generate`` tokens/s at batch 1/8/32 (threshold 0.9, dual cache), each unpadded (every prompt of one length) and
padded as the runner pads a batch (left-padded prompts of different lengths, so the attention mask reaches SDPA),
and one batch-32 decode at prompt 1024 / gen 256, each with its peak allocated and peak reserved memory; batched == alone token agreement on left-padded prompts (a rate: bf16 kernels may differ by
batch size). Then the tiny checkpoints (read without the safetensors package, decoded from token ids: no
tokenizer) in float32 and bfloat16 against the tokens recorded on the CPU (tests/fixtures/gpu_check_tiny_tokens.json).

Beside eager, per shape: the same generate with the layer stack compiled (``--compile``, reduce-overhead = CUDA graphs on
a GPU; models/compiled.py) at ``--compile-batches``, unpadded and padded, each after a warm-up decode of its shapes:
ms per step of both, the compile seconds, the answer tokens they agree on, and how many graphs inductor ran without
CUDA graphs (``cudagraph_skips``: 0 when reduce-overhead captured every one; gpu_compiled_<shape>.csv).

Writes gpu_forward_<shape>.csv, gpu_sdpa_<shape>.csv, gpu_generate_<shape>.csv, gpu_compiled_<shape>.csv (always with their header) and
gpu_summary.json under --out. Imports only torch, numpy, pandas and this repo.

Usage:  PYTHONPATH=. python3 scripts/gpu_check.py --out results/bench          (a GPU machine, under 8 minutes)
        PYTHONPATH=. python3 scripts/gpu_check.py --device cpu --dtype bfloat16 --layers 1 --width 128 ...  (tests)
        PYTHONPATH=. python scripts/gpu_check.py --record-tiny-reference     (CPU: rewrite the tiny tokens fixture)
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dllm_bench.decoding import (  # noqa: E402
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    build_rule,
    generate,
)
from dllm_bench.machine import fingerprint, kernel_width  # noqa: E402
from dllm_bench.models import DiffusionLM, FeatureCache, KVCache  # noqa: E402
from dllm_bench.models.compiled import COMPILE_MODES, CompiledLayers  # noqa: E402
from dllm_bench.models.config import ModelConfig  # noqa: E402
from dllm_bench.models.random_weights import random_network  # noqa: E402

CONFIGS = ROOT / "dllm_bench" / "models" / "reference_configs"
# LLaDA-MoE-7B-A1B's config.json is in no public code this project could read (docs/models.md), so its shape is
# assumed: OLMoE-1B-7B's layout (dInfer python/dinfer/model/configuration_olmoe.py defaults) with qk-norm, every
# layer MoE, keys as tools/configuration_lladamoe.py names them. Secondhand agreement (docs/models.md, "LLaDA-MoE's
# shape, secondhand"): hidden 2048, 16 layers, 16 heads (16 K/V), 64 experts top-8 of 1024, dense size 8192, every
# layer MoE, no shared expert, qk-norm, rope_theta 50000, 8192 positions, mask 156895, eos/pad 156892. Not seen
# anywhere: the vocabulary (157184 is LLaDA 2.0's, whose mask and pad ids are the same two: inferred), rms_norm_eps (the config
# class's default 1e-5), clip_qkv and the expert bias (assumed off, as OLMoE)
LLADA_MOE_ASSUMED = {
    "architectures": ["LLaDAMoEModelLM"], "model_type": "llada", "vocab_size": 157184, "hidden_size": 2048,
    "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64,
    "num_experts_per_tok": 8, "expert_intermediate_size": 1024, "dense_intermediate_size": 8192,
    "shared_expert_intermediate_size": None, "moe_layer_freq": [1] * 16, "qk_layernorm": True, "clip_qkv": None,
    "moe_router_enable_expert_bias": False, "rope_theta": 50000.0, "rms_norm_eps": 1e-5, "rope_scaling": None,
    "partial_rotary_factor": 1.0, "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
    "max_position_embeddings": 8192, "mask_token_id": 156895, "eos_token_id": 156892, "pad_token_id": 156892,
}
# shape -> its config.json (a file of reference_configs/, or the dict above)
SHAPES = {"llada-8b": CONFIGS / "llada-8b-instruct" / "config.json", "dream-7b": CONFIGS / "dream-v0-base-7b" / "config.json",
          "llada-moe-7b": LLADA_MOE_ASSUMED}
CHECKPOINTS = ROOT / "dllm_bench" / "tiny" / "checkpoints"
TINY_FIXTURE = ROOT / "tests" / "fixtures" / "gpu_check_tiny_tokens.json"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FORWARD_COLUMNS = ["shape", "cache", "mask", "batch", "prompt", "answer", "block", "forward_ms", "peak_gib"]
SDPA_COLUMNS = ["shape", "call", "mask", "batch", "queries", "keys", "default", "backend", "accepted", "ms"]
GENERATE_COLUMNS = ["shape", "batch", "padded", "prompt", "answer", "block", "wall_s", "nfe", "tokens_per_s",
                    "ms_per_step", "peak_gib", "peak_reserved_gib"]
# eager against the compiled layer stack (model.compile; dllm_bench/models/compiled.py), per batch
COMPILED_COLUMNS = ["shape", "mode", "batch", "padded", "nfe", "eager_ms_per_step", "compiled_ms_per_step", "speedup",
                    "compile_s", "token_agreement", "cudagraph_skips"]
BACKEND_OPS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
               "math": "MATH"}
# (name, flavour, policy, policy params, rule, rule params, cache, block) of the tiny checkpoints' decodes
TINY_SETTINGS = [("llada/threshold0.9/dual", "llada", "blocks", {}, "threshold", {"threshold": 0.9}, "dual", 8),
                 ("llada/topk/none", "llada", "blocks", {"steps": 24}, "topk", {}, "none", 8),
                 ("dream/maskgit_plus/none", "dream", "dream", {"steps": 24, "alg": "maskgit_plus"}, None, {}, "none", 24)]
TINY_GEN = 24


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    """Peak memory allocated by tensors since the last reset (GiB; None off CUDA)."""
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None


def peak_reserved_gib(device: torch.device) -> float | None:
    """Peak memory the caching allocator held since the last reset: what the process needs of the card (GiB)."""
    return round(torch.cuda.max_memory_reserved(device) / 2**30, 2) if device.type == "cuda" else None


class DeadlineReached(RuntimeError):
    """A phase's deadline passed during a measurement (raised at its next forward)."""


class DeadlineNetwork:
    """The network, refusing any forward after ``deadline`` (``time.perf_counter()``): a decode or a latency loop
    that runs past its phase's end stops between two steps instead of running on."""

    def __init__(self, model: DiffusionLM, deadline: float) -> None:
        self.model, self.deadline = model, deadline

    def __call__(self, *args, **kwargs):
        if time.perf_counter() > self.deadline:
            raise DeadlineReached(f"deadline passed ({time.perf_counter() - self.deadline:.1f} s ago)")
        return self.model(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.model, name)


def shape_config(shape: str) -> dict:
    """The config.json dict of a shape."""
    source = SHAPES[shape]
    return dict(source) if isinstance(source, dict) else json.loads(source.read_text())


def resized(raw: dict, layers: int | None, width: int | None) -> dict:
    """The config with fewer layers and/or a narrower width (heads of 64, the same GQA grouping where it divides,
    the same MLP ratios, the experts' too); the vocabulary and the expert count stay the real ones."""
    raw = dict(raw)
    keys = ("d_model", "n_heads", "n_kv_heads", "mlp_hidden_size", "n_layers") if "d_model" in raw else (
        "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "num_hidden_layers")
    d, h, kv, mlp, n = keys
    mlps = [k for k in (mlp, "dense_intermediate_size", "expert_intermediate_size", "shared_expert_intermediate_size")
            if isinstance(raw.get(k), int) and raw[k] > 0]
    if layers is not None:
        raw[n] = layers
        if isinstance(raw.get("moe_layer_freq"), list):
            raw["moe_layer_freq"] = (raw["moe_layer_freq"] * layers)[:layers]
    if width is not None:
        heads = max(1, width // 64)
        group = raw[h] // (raw.get(kv) or raw[h])
        raw[kv] = heads // group if group <= heads and heads % group == 0 else 1
        for key in mlps:
            raw[key] = max(8, width * raw[key] // raw[d] // 8 * 8)
        raw[d], raw[h] = width, heads
    return raw


def build_model(shape: str, device: torch.device, dtype: torch.dtype, layers: int | None, width: int | None) -> DiffusionLM:
    """The real config's architecture (optionally resized) with random weights on the device."""
    raw = resized(shape_config(shape), layers, width)
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


def forward_latency(model: DiffusionLM, mode: str, masked: bool, batch: int, prompt: int, answer: int, block: int,
                    repeats: int) -> float:
    """Seconds per forward of one cache mode's steady-state step (cache filled; LM head on one block), with an
    all-True bool key mask (the decoder's for a padded batch) or none (an unpadded batch)."""
    device = model.device
    x = torch.randint(0, model.config.vocab_size - 1000, (batch, prompt + answer), device=device)
    mask = torch.ones_like(x, dtype=torch.bool) if masked else None
    s, e = prompt, prompt + block
    with torch.no_grad():
        if mode == "none":
            return timed(lambda: model(x, attention_mask=mask, logits_range=(s, e)), device, repeats)
        if mode in ("prefix", "dual"):
            kv = KVCache()
            model(x, attention_mask=mask, cache=kv, logits_range=(s, e))
            end = x.shape[1] if mode == "prefix" else e
            return timed(lambda: model(x[:, s:end], attention_mask=mask, cache=kv, start=s, logits_range=(s, e)),
                         device, repeats)
        fc = FeatureCache(prompt_length=prompt)
        fc.plan(True, True, 0.0)
        model(x, attention_mask=mask, cache=fc, logits_range=(s, e))
        fc.plan(False, False, 0.25)
        return timed(lambda: model(x, attention_mask=mask, cache=fc, logits_range=(s, e)), device, repeats)


def dispatched_backend(call) -> str:
    """The SDPA implementation the default dispatch runs for ``call``, from the profiler's aten op names."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    names = [e.name for e in prof.events() if "scaled_dot_product" in e.name]
    for key in ("flash", "efficient", "cudnn", "math"):
        if any(key in n for n in names):
            return key
    return "unknown: " + ", ".join(sorted(set(names)))


def sdpa_dispatch(model: DiffusionLM, shape: str, batch: int, prompt: int, answer: int, block: int) -> list[dict]:
    """Per attention call of a decode (full canvas; a prefix step's answer queries; a dual step's block queries)
    and with/without the key mask: each backend alone (accepted, ms) and the default's choice."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg, device, dtype = model.config, model.device, model.dtype
    S = prompt + answer
    gqa = cfg.n_kv_heads != cfg.n_heads
    k = torch.randn(batch, cfg.n_kv_heads, S, cfg.head_dim, device=device, dtype=dtype)
    v = torch.randn_like(k)
    rows = []
    for call_name, T in (("full", S), ("prefix_step", answer), ("dual_step", block)):
        q = torch.randn(batch, cfg.n_heads, T, cfg.head_dim, device=device, dtype=dtype)
        for masked in (False, True):
            mask = torch.ones(batch, 1, 1, S, dtype=torch.bool, device=device) if masked else None

            def call(q=q, mask=mask):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

            default = dispatched_backend(call)
            for name, backend in BACKEND_OPS.items():
                ms = None
                try:
                    with sdpa_kernel([getattr(SDPBackend, backend)]):
                        ms = round(timed(call, device, 3) * 1e3, 3)
                except RuntimeError:
                    pass
                rows.append(dict(shape=shape, call=call_name, mask=masked, batch=batch, queries=T, keys=S,
                                 default=default, backend=name, accepted=ms is not None, ms=ms))
    return rows


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
    spec = DecodeSpec(Decoding(gen, block, build_policy("blocks"), build_rule("threshold", threshold=0.9),
                               build_cache("dual")))
    return generate(model, ids, mask, spec)


def generate_speed(model: DiffusionLM, batch: int, prompt: int, gen: int, block: int, padded: bool = False) -> dict:
    """Tokens/s and peak memory of ``generate`` (threshold 0.9, dual cache) at one batch size, after a short warm-up
    decode. ``padded``: prompts of different lengths (``prompt``, ``prompt`` - 7, ...) left-padded as the runner
    pads a batch, so the attention mask reaches SDPA; else every prompt has ``prompt`` ids and no mask is sent."""
    device = model.device
    lengths = [max(prompt - 7 * i, 1) for i in range(batch)] if padded else [prompt] * batch
    ids, mask = padded_prompts(model, lengths, seed=batch)
    with torch.no_grad():
        decode(model, ids[:, : max(prompt // 2, 1)], mask[:, : max(prompt // 2, 1)], block, block)
        sync(device)
        reset_peak(device)
        t = time.perf_counter()
        out = decode(model, ids, mask, gen, block)
        sync(device)
    wall = time.perf_counter() - t
    nfe = max(r.nfe for r in out.records)
    return dict(batch=batch, padded=padded, prompt=prompt, answer=gen, block=block, wall_s=round(wall, 3), nfe=nfe,
                tokens_per_s=round(batch * gen / wall, 1), ms_per_step=round(wall / nfe * 1e3, 2),
                peak_gib=peak_gib(device), peak_reserved_gib=peak_reserved_gib(device))


def compiled_speed(model, stack: CompiledLayers, batch: int, prompt: int, gen: int, block: int,
                   padded: bool) -> dict:
    """The same decode (threshold 0.9, dual cache) eager and with the compiled layer ``stack``, each after a
    warm-up decode of the same shapes (the compiled one's compiles them: ``compile_s``); ms per step of each and
    the share of answer tokens they agree on (bf16 kernels may round differently)."""
    network = model.model if isinstance(model, DeadlineNetwork) else model
    lengths = [max(prompt - 7 * i, 1) for i in range(batch)] if padded else [prompt] * batch
    ids, mask = padded_prompts(network, lengths, seed=batch)
    timed, tokens = {}, {}
    compile_s = 0.0
    skips = torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]
    try:
        for path in ("eager", "compiled"):
            network.layer_stack = stack if path == "compiled" else None  # None: eager
            with torch.no_grad():
                before = stack.compile_s
                decode(model, ids, mask, gen, block)
                compile_s = stack.compile_s - before
                sync(network.device)
                t = time.perf_counter()
                out = decode(model, ids, mask, gen, block)
                sync(network.device)
            timed[path] = (time.perf_counter() - t) / max(r.nfe for r in out.records)
            tokens[path] = out.tokens
    finally:
        network.layer_stack = None
    return dict(mode=stack.mode, batch=batch, padded=padded, nfe=max(r.nfe for r in out.records),
                eager_ms_per_step=round(timed["eager"] * 1e3, 2),
                compiled_ms_per_step=round(timed["compiled"] * 1e3, 2),
                speedup=round(timed["eager"] / timed["compiled"], 3), compile_s=round(compile_s, 1),
                token_agreement=round(float((tokens["eager"] == tokens["compiled"]).float().mean()), 4),
                cudagraph_skips=torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] - skips)


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


def write_csv(rows: list[dict], columns: list[str], path: Path) -> None:
    """Rows under a fixed header (a header-only file when every row was skipped, never an empty one)."""
    pd.DataFrame(rows, columns=columns).to_csv(path, index=False)


def check_shape(shape: str, args, device: torch.device, dtype: torch.dtype, deadline: float, out: Path) -> dict:
    """Every measurement for one shape until ``deadline``: a step that would start after it is skipped, one that
    runs past it stops at its next forward; both are listed in the summary (``skipped``, ``stopped``)."""
    t0 = time.perf_counter()
    network = build_model(shape, device, dtype, args.layers, args.width)
    model = DeadlineNetwork(network, deadline)
    reset_peak(device)
    summary = {"shape": shape, "network": type(network).__name__, "parameters": network.num_parameters(),
               "layers": network.config.n_layers,
               "width": network.config.d_model, "dtype": str(dtype).replace("torch.", ""),
               "build_s": round(time.perf_counter() - t0, 1), "skipped": [], "stopped": []}

    def run(what: str, measure, *args, **kwargs):
        """``measure(*args, **kwargs)``, or None when the deadline has passed before it or passes during it."""
        if time.perf_counter() > deadline:
            summary["skipped"].append(what)
            return None
        try:
            return measure(*args, **kwargs)
        except DeadlineReached:
            summary["stopped"].append(what)
            return None

    rows = []
    for answer in args.answers:
        for batch in args.forward_batches:
            for mode in ("none", "prefix", "dual", "dllm"):
                for masked in (False, True):
                    reset_peak(device)
                    sec = run(f"forward {mode} mask={masked} answer {answer} batch {batch}",
                              forward_latency, model, mode, masked, batch, args.prompt, answer, args.block,
                              args.repeats)
                    if sec is not None:
                        rows.append(dict(shape=shape, cache=mode, mask=masked, batch=batch, prompt=args.prompt,
                                         answer=answer, block=args.block, forward_ms=round(sec * 1e3, 3),
                                         peak_gib=peak_gib(device)))
    write_csv(rows, FORWARD_COLUMNS, out / f"gpu_forward_{shape}.csv")
    sdpa = []
    for batch in args.forward_batches:
        sdpa += run(f"sdpa dispatch batch {batch}",
                    sdpa_dispatch, model, shape, batch, args.prompt, args.answers[-1], args.block) or []
    write_csv(sdpa, SDPA_COLUMNS, out / f"gpu_sdpa_{shape}.csv")
    gen_rows = []
    for batch in args.generate_batches:
        for padded in (False, True):
            row = run(f"generate batch {batch} padded={padded}",
                      generate_speed, model, batch, args.prompt, args.gen, args.block, padded)
            if row is not None:
                gen_rows.append(dict(shape=shape, **row))
    write_csv(gen_rows, GENERATE_COLUMNS, out / f"gpu_generate_{shape}.csv")
    compiled_rows = []
    if args.compile != "none":
        stack = CompiledLayers(network, args.compile)
        for batch in args.compile_batches:
            for padded in (False, True):
                row = run(f"compiled {args.compile} batch {batch} padded={padded}",
                          compiled_speed, model, stack, batch, args.prompt, args.gen, args.block, padded)
                if row is not None:
                    compiled_rows.append(dict(shape=shape, **row))
    write_csv(compiled_rows, COMPILED_COLUMNS, out / f"gpu_compiled_{shape}.csv")
    big = run(f"decode batch {args.big_batch} prompt {args.big_prompt} gen {args.big_gen}",
              generate_speed, model, args.big_batch, args.big_prompt, args.big_gen, args.block,
              padded=True)
    if big is not None:
        summary["big_decode"] = big
    lengths = [args.prompt - 7 * i for i in range(args.agreement_rows)]
    agreement = run("batched vs alone agreement", batch_agreement, model, lengths, args.gen, args.block)
    if agreement is not None:
        summary["batched_vs_alone_token_agreement"] = round(agreement, 4)
    summary["forward"], summary["generate"], summary["compiled"] = rows, gen_rows, compiled_rows
    summary["sdpa_default"] = sorted({(r["call"], r["mask"], r["batch"], r["default"]) for r in sdpa})
    summary["peak_memory_gib"], summary["peak_reserved_gib"] = peak_gib(device), peak_reserved_gib(device)
    summary["phase_s"] = round(time.perf_counter() - t0, 1)
    del model, network
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return summary


# ---------------------------------------------------------------- the tiny checkpoints, without extra packages

_SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64,
                       "I64": torch.int64, "I32": torch.int32}


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a .safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = bytearray(data[8 + n:])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = torch.frombuffer(body, dtype=_SAFETENSORS_DTYPES[meta["dtype"]], count=(b - a) // _SAFETENSORS_DTYPES[meta["dtype"]].itemsize, offset=a).reshape(meta["shape"]).clone()
    return out


def load_tiny(flavour: str, device: torch.device, dtype: torch.dtype) -> DiffusionLM:
    """A shipped tiny checkpoint from its config.json and model.safetensors alone (no tokenizer, no safetensors
    package), as ``load_model`` builds it."""
    from dllm_bench.models.checkpoint import detect_naming

    directory = CHECKPOINTS / f"tiny_{flavour}"
    config = ModelConfig.from_hf_config(json.loads((directory / "config.json").read_text()), name_or_path=str(directory))
    tensors = read_safetensors(directory / "model.safetensors")
    config.tensor_naming = detect_naming(list(tensors))
    model = DiffusionLM(config)
    model.load_state_dict({k: v.to(dtype) for k, v in tensors.items()}, strict=True)
    return model.to(device=device, dtype=dtype).eval()


def tiny_spec(setting: tuple) -> DecodeSpec:
    _, _, policy, pparams, rule, rparams, cache, block = setting
    decoding = Decoding(TINY_GEN, block, build_policy(policy, **pparams),
                        build_rule(rule, **rparams) if rule else None, build_cache(cache), early_stop=False)
    return DecodeSpec(decoding, Sampling())  # no early stop: the end-of-turn id would need the tokenizer


def tiny_tokens(device: torch.device, dtype: torch.dtype, prompts: dict[str, list[list[int]]],
                rows: int | None = None, deadline: float = float("inf"), missed: dict | None = None
                ) -> dict[str, list[list[int]]]:
    """Answer ids of every tiny setting (the first ``rows`` prompts) decoded on ``device`` in ``dtype``, until
    ``deadline``: a setting that would start after it is listed in ``missed["skipped"]``, one running past it stops
    at its next forward (``missed["stopped"]``); neither is in the result."""
    out, models = {}, {}
    for setting in TINY_SETTINGS:
        what = f"{str(dtype).replace('torch.', '')} {setting[0]}"
        if time.perf_counter() > deadline:
            if missed is not None:
                missed["skipped"].append(what)
            continue
        flavour = setting[1]
        model = models.get(flavour) or models.setdefault(flavour, load_tiny(flavour, device, dtype))
        ids = torch.tensor(prompts[flavour][:rows], dtype=torch.long, device=device)
        try:
            with torch.no_grad():
                out[setting[0]] = generate(DeadlineNetwork(model, deadline), ids, None,
                                           tiny_spec(setting)).tokens.cpu().tolist()
        except DeadlineReached:
            if missed is not None:
                missed["stopped"].append(what)
    return out


def cpu_reference(fixture: dict) -> tuple[dict, dict[str, list[int]] | None, str]:
    """The recorded tokens a CPU compares with, the rows compared (None: all) and where they come from: its own
    machine's under its own kernel width where recorded (the recording machine's or one of ``other_machines``),
    else the recording machine's near-tie-free rows (equal under every recorded width and in float32 and bf16;
    a decode that crosses a near-tie may go the other way on another CPU's last bits)."""
    here, width = fingerprint(), kernel_width()
    if fixture.get("machine") == here:
        if width == fixture["capability"]:
            return fixture["tokens"], None, "recorded here"
        if width in fixture.get("cpu_capability_tokens", {}):
            return fixture["cpu_capability_tokens"][width], None, "recorded here"
    for other in fixture.get("other_machines", []):
        if other["machine"] == here and other["capability"] == width:
            return other["tokens"], None, "recorded here"
    reference = fixture.get("cpu_capability_tokens", {}).get(width, fixture["tokens"])
    return reference, fixture["near_tie_free"], "near-tie-free rows of the recording machine"


def tiny_agreement(device: torch.device, rows: int | None, deadline: float = float("inf")) -> dict:
    """Per dtype and setting: the share of answer tokens and of whole answers equal to the CPU's recorded ones (on a
    CPU: see cpu_reference; a GPU compares every row with the recording machine's); the settings the phase's
    ``deadline`` left out are listed under ``skipped`` and ``stopped``."""
    if not TINY_FIXTURE.is_file():
        return {"missing": f"{TINY_FIXTURE.relative_to(ROOT)}: run --record-tiny-reference on the CPU first"}
    fixture = json.loads(TINY_FIXTURE.read_text())
    reference, compared, source = fixture["tokens"], None, "the recording machine's CPU"
    if device.type == "cpu":
        reference, compared, source = cpu_reference(fixture)
    result = {"reference": source, "skipped": [], "stopped": []}
    for name in ("float32", "bfloat16"):
        got = tiny_tokens(device, DTYPES[name], fixture["prompts"], rows, deadline, result)
        per = {}
        for setting, tokens in got.items():
            keep = list(range(len(tokens))) if compared is None else [r for r in compared[setting] if r < len(tokens)]
            ref = torch.tensor(reference[name][setting])[keep].view(len(keep), -1)
            now = torch.tensor(tokens)[keep].view(len(keep), -1)
            per[setting] = {"tokens": round(float((now == ref).float().mean()), 4) if keep else None,
                            "answers": round(float((now == ref).all(dim=1).float().mean()), 4) if keep else None,
                            "rows": len(keep)}
        result[name] = per
    return result


def cpu_capability() -> str:
    """The SIMD width ATen's CPU kernels use here (ATEN_CPU_CAPABILITY or the CPU's own): default, avx2, avx512."""
    return kernel_width()


def near_tie_free(fixture: dict) -> dict[str, list[int]]:
    """Per setting, the rows whose tokens are the same under every recorded kernel width, in float32 and bf16."""
    widths = [fixture["tokens"], *fixture.get("cpu_capability_tokens", {}).values()]
    first = fixture["tokens"]["float32"]
    return {setting: [r for r in range(len(rows)) if all(w[dt][setting][r] == rows[r] for w in widths
                                                          for dt in ("float32", "bfloat16"))]
            for setting, rows in first.items()}


def record_tiny_reference(puzzles: int = 20) -> None:
    """Write the fixture: the first ``puzzles`` held-out prompts' ids and their CPU tokens in float32 and bf16,
    with the machine's fingerprint (dllm_bench/machine.py).

    bf16 decodes of the tiny checkpoints change with the kernels' SIMD width and with the machine (near-ties decided
    by last bits), so a run under another ``ATEN_CPU_CAPABILITY`` than the fixture's adds that width's tokens beside
    the first ones, and a run on another machine adds its own under ``other_machines``."""
    from dllm_bench.models import load_model
    from dllm_bench.tasks.sudoku import SudokuTask
    from dllm_bench.tiny.encoding import prompt_ids

    cpu = torch.device("cpu")
    if TINY_FIXTURE.is_file():
        fixture = json.loads(TINY_FIXTURE.read_text())
        tokens = {name: tiny_tokens(cpu, DTYPES[name], fixture["prompts"]) for name in ("float32", "bfloat16")}
        if fixture.get("machine") != fingerprint():
            others = [o for o in fixture.get("other_machines", [])
                      if (o["machine"], o["capability"]) != (fingerprint(), cpu_capability())]
            fixture["other_machines"] = [*others, {"machine": fingerprint(), "capability": cpu_capability(),
                                                   "tokens": tokens}]
            TINY_FIXTURE.write_text(json.dumps(fixture) + "\n")
            print(f"wrote this machine's {cpu_capability()} tokens into {TINY_FIXTURE}")
            return
        if fixture["capability"] != cpu_capability():
            fixture.setdefault("cpu_capability_tokens", {})[cpu_capability()] = tokens
            fixture["near_tie_free"] = near_tie_free(fixture)
            TINY_FIXTURE.write_text(json.dumps(fixture) + "\n")
            print(f"wrote the {cpu_capability()} tokens into {TINY_FIXTURE}")
            return
    rows = SudokuTask(limit=puzzles).docs()
    prompts = {}
    for flavour in ("llada", "dream"):
        tok = load_model(CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype="float32").tokenizer
        prompts[flavour] = [prompt_ids(tok, r["puzzle"]) for r in rows]
    tokens = {name: tiny_tokens(cpu, DTYPES[name], prompts) for name in ("float32", "bfloat16")}
    note = ("CPU tokens of the shipped tiny checkpoints (scripts/gpu_check.py --record-tiny-reference, torch "
            f"{torch.__version__}, ATEN_CPU_CAPABILITY {cpu_capability()}, on the machine of 'machine'); the GPU "
            "check decodes the same prompts on the device and reports agreement; cpu_capability_tokens: the same "
            "decodes under the other kernel widths (bf16 near-ties go another way there); near_tie_free: the rows "
            "equal under every width in float32 and bf16, which another CPU compares; other_machines: tokens "
            "recorded on other CPUs")
    fixture = {"note": note, "machine": fingerprint(), "capability": cpu_capability(), "gen_length": TINY_GEN,
               "prompts": prompts, "tokens": tokens}
    fixture["near_tie_free"] = near_tie_free(fixture)
    TINY_FIXTURE.write_text(json.dumps(fixture) + "\n")
    print(f"wrote {TINY_FIXTURE}")


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                    help="weights and activations (default: bfloat16 on cuda, float32 on cpu)")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the real shape (tests)")
    ap.add_argument("--width", type=int, default=None, help="a narrower hidden size (heads of 64; tests)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--budget-s", type=float, default=400.0,
                    help="the whole check's time: each phase (shape, then the tiny checkpoints) gets an equal share "
                    "of what is left when it starts and stops at its deadline")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--answers", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--forward-batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--generate-batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--gen", type=int, default=256, help="answer length of the generate runs")
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--big-batch", type=int, default=32)
    ap.add_argument("--big-prompt", type=int, default=1024)
    ap.add_argument("--big-gen", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compile", choices=["none", *COMPILE_MODES], default=None,
                    help="time generate eager and with the layer stack compiled in this mode, side by side "
                         "(default reduce-overhead on CUDA, none elsewhere)")
    ap.add_argument("--compile-batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--agreement-rows", type=int, default=8)
    ap.add_argument("--tiny-rows", type=int, default=None, help="tiny-checkpoint prompts to decode (default all)")
    ap.add_argument("--record-tiny-reference", action="store_true",
                    help="CPU only: write this machine's and kernel width's tiny tokens into the fixture")
    args = ap.parse_args(argv)
    if args.compile is None:
        args.compile = "reduce-overhead" if torch.device(args.device).type == "cuda" else "none"
    for name in ("prompt", "block", "gen", "big_batch", "big_prompt", "big_gen", "repeats", "agreement_rows"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)} must be >= 1")
    if args.gen % args.block or args.big_gen % args.block or any(a < args.block for a in args.answers):
        ap.error(f"--gen {args.gen} and --big-gen {args.big_gen} must be multiples of --block {args.block}, and "
                 f"--answers {args.answers} at least one block")
    if args.prompt - 7 * (args.agreement_rows - 1) < 1:
        ap.error(f"--prompt {args.prompt} is too short for {args.agreement_rows} agreement rows (each 7 ids "
                 f"shorter); use --prompt >= {7 * args.agreement_rows - 6}")
    if args.width is not None and args.width < 64:
        ap.error(f"--width {args.width} must be >= 64 (one head of 64)")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: no CUDA device visible to torch {torch.__version__}")
    return args


def phase_deadline(start: float, budget_s: float, index: int, phases: int) -> float:
    """The deadline of phase ``index`` of ``phases``, set when it starts: an equal share of what the budget has left
    now, so time an earlier phase did not use passes on and one that overran costs the later phases alike."""
    now = time.perf_counter()
    left = start + budget_s - now
    return now + max(left, 0.0) / (phases - index)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.record_tiny_reference:
        record_tiny_reference()
        return {}
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype] if args.dtype else torch.bfloat16 if device.type == "cuda" else torch.float32
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    summary = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "dtype": str(dtype).replace("torch.", ""), "layers": args.layers,
               "width": args.width, "budget_s": args.budget_s, "shapes": []}
    path = out / "gpu_summary.json"
    phases = len(args.shapes) + 1  # the shapes, LLaDA first, then the tiny checkpoints (seconds on a GPU)
    for i, shape in enumerate(args.shapes):
        summary["shapes"].append(check_shape(shape, args, device, dtype, phase_deadline(start, args.budget_s, i, phases),
                                             out))
        summary["total_s"] = round(time.perf_counter() - start, 1)
        path.write_text(json.dumps(summary, indent=1) + "\n")
    summary["tiny_checkpoints_vs_cpu"] = tiny_agreement(device, args.tiny_rows,
                                                        phase_deadline(start, args.budget_s, phases - 1, phases))
    summary["total_s"] = round(time.perf_counter() - start, 1)
    summary["over_budget_s"] = round(max(summary["total_s"] - args.budget_s, 0.0), 1)  # the last forward's overrun
    path.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["tiny_checkpoints_vs_cpu"]))
    for s in summary["shapes"]:
        print(f"{s['shape']}: agreement {s.get('batched_vs_alone_token_agreement')}, big decode "
              f"{s.get('big_decode')}, peak {s['peak_memory_gib']} GiB allocated / {s['peak_reserved_gib']} reserved, "
              f"skipped {s['skipped']}, stopped at the deadline {s['stopped']}")
        print("sdpa default:", s["sdpa_default"])
        print(pd.DataFrame(s["forward"], columns=FORWARD_COLUMNS).to_string(index=False))
        print(pd.DataFrame(s["generate"], columns=GENERATE_COLUMNS).to_string(index=False))
        print(pd.DataFrame(s["compiled"], columns=COMPILED_COLUMNS).to_string(index=False))
    tiny = summary["tiny_checkpoints_vs_cpu"]
    print(f"tiny checkpoints: skipped {tiny.get('skipped')}, stopped at the deadline {tiny.get('stopped')}")
    print(f"total {summary['total_s']}s of a {args.budget_s:g} s budget (over by {summary['over_budget_s']} s) -> {out}")
    return summary


if __name__ == "__main__":
    main()
