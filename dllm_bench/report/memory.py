"""GPU memory a decoding cell needs at a batch size, and whether it fits beside the weights.

An upper bound from the shapes alone (bfloat16 weights and activations, nothing measured): the weights (each model
at its own config where ``MODEL_SHAPES`` names one: the block-diffusion and LLaDA2 MoE models; else its flavour's 8B
model), the cache a forward keeps (K/V for prefix/dual and the block-diffusion policy's committed blocks, K/V and
attention/FFN outputs for dLLM-Cache), one full forward's largest activations (the SwiGLU intermediate), the LM
head's logits at every candidate of the first step (the whole window: all of the answer for Dream's policies,
SlowFast ``dream`` and block = gen) and the confidence's scratch, which
:func:`dllm_bench.decoding.confidence.candidate_predictions` bounds by taking the rows in chunks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dllm_bench.decoding.caches import CACHES
from dllm_bench.decoding.confidence import CHUNK_BYTES
from dllm_bench.models.architectures import architecture_of
from dllm_bench.models.config import ModelConfig

CONFIGS = Path(__file__).resolve().parents[1] / "models" / "reference_configs"
SHAPE_CONFIGS = {"llada-8b": CONFIGS / "llada-8b-instruct" / "config.json",
                 "dream-7b": CONFIGS / "dream-v0-base-7b" / "config.json",
                 "fast-dllm-v2-7b": CONFIGS / "fast-dllm-v2-7b" / "config.json",
                 "fast-dllm-v2-1.5b": CONFIGS / "fast-dllm-v2-1.5b" / "config.json",
                 "sdar-8b": CONFIGS / "sdar-8b-chat" / "config.json",
                 "llada2-mini": CONFIGS / "llada2-mini" / "config.json",
                 "llada2-flash": CONFIGS / "llada2-flash" / "config.json"}
# a model whose shape is not its flavour's 8B one: its preset's name_or_path -> a shape above (LLaDA2.1 and DMax are
# LLaDA2.0-mini's architecture, their presets say so; the other presets take llada-8b / dream-7b by flavour)
MODEL_SHAPES = {"Efficient-Large-Model/Fast_dLLM_v2_7B": "fast-dllm-v2-7b",
                "Efficient-Large-Model/Fast_dLLM_v2_1.5B": "fast-dllm-v2-1.5b",
                "JetLM/SDAR-8B-Chat": "sdar-8b",
                "inclusionAI/LLaDA2.0-mini": "llada2-mini", "inclusionAI/LLaDA2.1-mini": "llada2-mini",
                "Zigeng/DMax-16B": "llada2-mini", "Zigeng/DMax-Math-16B": "llada2-mini",
                "Zigeng/DMax-Coder-16B": "llada2-mini",
                "inclusionAI/LLaDA2.0-flash": "llada2-flash"}
GPU_GIB = 80.0  # the papers' A100/H100 80 GB
# float64-sized [rows, V] copies the confidence holds at once: top-1 (the logits' copy and its exp, in place)
# vs the softmax measures (cast, log-softmax, its exp, the product; margin's softmax and top-2)
SCRATCH_COPIES = {"top1_prob": 1, "random": 0, "margin": 3, "neg_entropy": 4}
PRECISION_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}
DREAM_MEASURES = {"origin": "random", "maskgit_plus": "top1_prob", "topk_margin": "margin", "entropy": "neg_entropy"}
REMASKING_MEASURES = {"low_confidence": "top1_prob", "random": "random", "entropy": "neg_entropy"}
GiB = 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    """GiB per part and in all, for one decode at ``batch`` rows."""

    batch: int
    window: int
    weights: float
    cache: float
    activations: float
    logits: float
    confidence: float

    @property
    def total(self) -> float:
        return self.weights + self.cache + self.activations + self.logits + self.confidence

    def fits(self, capacity: float = GPU_GIB) -> bool:
        return self.total <= capacity


def shape_config(shape: str) -> ModelConfig:
    """The model config of a shape name (``SHAPE_CONFIGS``), parsed by the network its ``architectures`` name."""
    raw = json.loads(SHAPE_CONFIGS[shape].read_text())
    arch = architecture_of(raw)
    return arch.parse(raw, shape) if arch is not None else ModelConfig.from_hf_config(raw, name_or_path=shape)


def model_shape(model: dict[str, Any]) -> str:
    """The shape a composed run's ``model`` section is estimated at: its own, else its flavour's 8B model."""
    return MODEL_SHAPES.get(str(model.get("name_or_path")), "dream-7b" if model.get("flavour") == "dream" else "llada-8b")


def parameters(cfg: ModelConfig) -> int:
    """Parameter count of the network from its config: embeddings (one matrix when the head is tied), attention
    (q, k, v, o, their biases, qk-norm), two norms a layer, a dense SwiGLU or a MoE layer (router, routed and
    shared experts: LLaDA2's ``first_k_dense_replace`` dense layers first), the final norm."""
    d, hd, H, KV = cfg.d_model, cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    layer = d * H * hd * 2 + d * KV * hd * 2 + 2 * d
    layer += (H + 2 * KV) * hd if cfg.qkv_bias else 0
    layer += 2 * hd if getattr(cfg, "qk_norm", False) else 0
    experts = getattr(cfg, "num_experts", 0)
    moe_layers = cfg.n_layers - cfg.first_k_dense_replace if experts else 0
    moe = experts * d + 3 * d * cfg.moe_intermediate_size * (experts + cfg.num_shared_experts) if experts else 0
    embeddings = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
    return (embeddings + cfg.n_layers * layer + (cfg.n_layers - moe_layers) * 3 * d * cfg.mlp_hidden_size
            + moe_layers * moe + d)


def window_length(config: dict[str, Any]) -> int:
    """Answer positions whose logits one step may take: the whole answer for Dream's policies and SlowFast
    ``dream`` (no blocks), else a block."""
    policy = config["policy"]
    whole = policy["name"] in ("dream", "dream_threshold") or policy.get("flavour", policy.get("variant")) == "dream"
    return int(config["gen_length"]) if whole else int(config["block_length"])


def measure(config: dict[str, Any]) -> str:
    """The confidence measure a cell ranks by."""
    policy, rule = config["policy"], config.get("rule") or {}
    if policy["name"] == "dream":
        return DREAM_MEASURES[policy.get("alg", "maskgit_plus")]
    if rule.get("name") == "topk":
        return REMASKING_MEASURES[rule.get("remasking", "low_confidence")]
    return "top1_prob"


def decode_memory(cfg: ModelConfig, config: dict[str, Any], batch: int, prompt: int,
                  chunk_bytes: int | None = CHUNK_BYTES) -> MemoryEstimate:
    """Memory of one decode of a composed run ``config`` at ``batch`` rows and ``prompt`` prompt ids, in bf16;
    ``chunk_bytes=None``: the confidence over the whole window at once (before the chunking)."""
    S = prompt + int(config["gen_length"])
    window = window_length(config)
    hd, V = cfg.head_dim, cfg.vocab_size
    cache = config["cache"]["name"]
    width = {"k": cfg.n_kv_heads * hd, "v": cfg.n_kv_heads * hd, "attn": cfg.d_model, "ffn": cfg.d_model}
    stores = set(CACHES[cache].stores) | ({"k", "v"} if config["policy"].get("kv_cache") == "committed" else set())
    cache_bytes = sum(cfg.n_layers * batch * S * width[t] * 2 for t in stores)
    activations = 3 * batch * S * cfg.mlp_hidden_size * 2 + 4 * batch * S * cfg.d_model * 2
    rows = batch * window
    logits = rows * V * 2
    precision = PRECISION_BYTES.get(str(config.get("confidence_precision", "float64")), 2)
    copies = SCRATCH_COPIES[measure(config)]
    scratch_rows = rows if chunk_bytes is None else min(rows, max(1, chunk_bytes // (8 * V)))
    confidence = copies * scratch_rows * V * precision
    return MemoryEstimate(batch, window, parameters(cfg) * 2 / GiB, cache_bytes / GiB, activations / GiB,
                          logits / GiB, confidence / GiB)


def cell_memory(spec, batch: int, prompt: int, chunk_bytes: int | None = CHUNK_BYTES) -> list[tuple[Any, MemoryEstimate]]:
    """(cell, estimate) for every runnable cell of a table at ``batch`` rows and ``prompt`` prompt ids."""
    from dllm_bench.report.runs import compose_configs
    from dllm_bench.report.tables import table_cells

    cells = [c for c in table_cells(spec) if c.unavailable is None]
    configs = compose_configs([(spec.preset, c.overrides) for c in cells])
    shapes = {name: shape_config(name) for name in {model_shape(conf["model"]) for conf in configs}}
    return [(c, decode_memory(shapes[model_shape(conf["model"])], conf, batch, prompt, chunk_bytes))
            for c, conf in zip(cells, configs)]


def memory_report(specs, batch: int, prompt: int = 1024, capacity: float = GPU_GIB) -> str:
    """Lines for ``--estimate``: each GPU table's largest cell at ``batch`` rows, and a warning for every cell
    that will not fit in ``capacity`` GiB."""
    lines = [f"Memory at batch {batch}, prompt {prompt}, bf16 (an upper bound from the shapes, "
             f"dllm_bench/report/memory.py; {capacity:.0f} GiB per GPU):"]
    for spec in specs:
        if not spec.needs_gpu:
            continue
        estimates = cell_memory(spec, batch, prompt)
        if not estimates:
            continue
        cell, worst = max(estimates, key=lambda ce: ce[1].total)
        lines.append(f"- {spec.name}: largest {worst.total:.1f} GiB ({cell.row[0]} / {cell.col[0]}: weights "
                     f"{worst.weights:.1f}, cache {worst.cache:.1f}, activations {worst.activations:.1f}, logits "
                     f"{worst.logits:.1f}, confidence {worst.confidence:.1f}; window {worst.window})")
        for c, e in estimates:
            if not e.fits(capacity):
                lines.append(f"  WARNING: {spec.name} {c.row[0]} / {c.col[0]} needs {e.total:.1f} GiB at batch "
                             f"{batch}: it will not fit in {capacity:.0f} GiB; use a smaller batch_size")
    return "\n".join(lines)
