"""GPU-side check of LLaDA-V at the real shapes with random weights (no download, no tokenizer).

Builds the published architecture (LLaDA-8B language model with LLaMA-style names, SigLIP so400m-patch14-384
up to layer -2, mlp2x_gelu projector, anyres_max_4 tiling) directly on the device, then checks on synthetic
images of MathVista-like sizes:

1. tiling and the feature merge give exactly the predicted number of image embeddings per image;
2. vision tower, projector and a full forward over the spliced canvas are finite and correctly shaped;
3. the decoding engine runs the Fast-dLLM++ MathVista setting (gen = block = 96, forbidden tokens) with the
   full-step baseline (top-k, 48 steps), Fast-dLLM factor and Fréchet with the prefix cache (refresh every 32),
   and the dual cache;
4. batched vs alone and prefix-refresh-every-step vs no cache agreement (reported; bf16 may flip near-ties).

Usage:  python scripts/gpu_check_llada_v.py --device cuda            (real shapes, ~17 GB, a few minutes)
        python scripts/gpu_check_llada_v.py --device cpu --shape tiny --gen 16 --block 16 --steps 8 \
            --prompt-tokens 20 --refresh 4                              (same code path on CPU, seconds)
Writes a JSON summary (``--out``) and exits non-zero when a shape or count check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from dllm_bench.decoding import (
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    build_rule,
    generate,
)
from dllm_bench.models.image_processing import image_token_count
from dllm_bench.models.llada_v import IMAGE_PLACEHOLDER_ID, LLaDAV, VisionSettings, language_config

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "dllm_bench" / "models" / "reference_configs" / "llada-v-language-model" / "config.json"
PUBLISHED_VISION = {
    "model_type": "llava_llada", "mm_vision_tower": "google/siglip2-so400m-patch14-384", "mm_hidden_size": 1152,
    "mm_projector_type": "mlp2x_gelu", "mm_vision_select_layer": -2, "mm_patch_merge_type": "spatial_unpad",
    "image_aspect_ratio": "anyres_max_4", "image_grid_pinpoints": "(1x1),...,(6x6)",
}
TINY = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "mm_hidden_size": 32,
    "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
                      "image_size": 28, "patch_size": 14},
}
LLADA_IDS = {"bos": 126080, "eos": 126081, "start_header": 126346, "end_header": 126347, "eot": 126348}
FORBIDDEN = (126080, 126081, 126346, 126347)


def build_model(shape: str, device: torch.device, dtype: torch.dtype) -> LLaDAV:
    """The architecture from the real config (or a tiny one), random weights initialised on the device."""
    raw = {**json.loads(REFERENCE.read_text()), **PUBLISHED_VISION, **(TINY if shape == "tiny" else {})}
    config = language_config(raw)
    config.bos_token_id, config.eot_token_id = LLADA_IDS["bos"], LLADA_IDS["eot"]  # what the tokenizer fills in
    with torch.device("meta"):
        model = LLaDAV(config, VisionSettings.from_hf_config(raw))
    model = model.to(dtype).to_empty(device=device)  # allocate once, already in the target dtype
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "layer_norm1.weight", "layer_norm2.weight")):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=gen)
    model.vision_tower.reset_position_ids(device)
    return model.eval()


def synthetic_image(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8))


def prompt_ids(n_text: int, seed: int) -> list[int]:
    """Chat-shaped ids: BOS, user header, <image>, random text ids, EoT, assistant header."""
    rng = np.random.default_rng(seed)
    text = rng.integers(1000, 100000, size=n_text).tolist()
    head = [LLADA_IDS["bos"], LLADA_IDS["start_header"], 882, LLADA_IDS["end_header"], 271]
    tail = [LLADA_IDS["eot"], LLADA_IDS["start_header"], 78191, LLADA_IDS["end_header"], 271]
    return head + [IMAGE_PLACEHOLDER_ID, 198] + text + tail


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    report: dict = {"device": str(device), "shape": args.shape, "dtype": args.dtype, "checks": {}, "runs": []}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
        torch.cuda.reset_peak_memory_stats(device)
    t = time.perf_counter()
    model = build_model(args.shape, device, dtype)
    sync(device)
    report["build_s"] = round(time.perf_counter() - t, 2)
    report["parameters"] = model.num_parameters()
    checks = report["checks"]

    sizes = [tuple(int(v) for v in s.split("x")) for s in args.image_sizes.split(",")]
    if args.shape == "tiny":
        sizes = [(max(1, w // 13), max(1, h // 13)) for w, h in sizes]
    images = [synthetic_image(w, h, i) for i, (w, h) in enumerate(sizes)]
    processed = [model.preprocess(im) for im in images]
    checks["tiles"] = [list(p.pixel_values.shape) for p in processed]
    t = time.perf_counter()
    embeds = model.image_embeddings(processed)
    sync(device)
    report["vision_s"] = round(time.perf_counter() - t, 3)
    predicted = [image_token_count(p.image_size, model.vision.anyres) for p in processed]
    checks["image_tokens"] = [e.shape[0] for e in embeds]
    checks["image_tokens_match_prediction"] = checks["image_tokens"] == predicted
    checks["image_embeddings_finite"] = all(bool(torch.isfinite(e).all()) for e in embeds)
    with torch.no_grad():
        feats = model.vision_tower(processed[0].pixel_values[:1].to(device, dtype))
    side = model.vision.anyres.features_per_side
    checks["tower_output_shape_ok"] = list(feats.shape) == [1, side * side, model.vision.hidden_size]

    rows = [prompt_ids(args.prompt_tokens, i) for i in range(len(images))]
    batch = model.build_inputs(rows, [[im] for im in images], gen_length=args.gen)
    report["prompt_lengths"] = batch.attention_mask.sum(1).tolist()
    b, p_len = batch.input_ids.shape
    canvas = torch.cat([batch.input_ids, torch.full((b, args.gen), model.config.mask_token_id, device=device)], 1)
    mask = torch.cat([batch.attention_mask, torch.ones(b, args.gen, dtype=torch.long, device=device)], 1)
    with torch.no_grad():
        logits = model(canvas, mask, **batch.model_kwargs)
    checks["logits_shape_ok"] = list(logits.shape) == [b, p_len + args.gen, model.config.vocab_size]
    checks["logits_finite"] = bool(torch.isfinite(logits).all())
    del logits

    half = args.steps
    settings = [
        ("topk-steps", "topk", {}, half, "none", {}),
        ("factor-prefix32", "factor", {"f": 1.0}, None, "prefix", {"refresh_every": args.refresh}),
        ("frechet-prefix32", "frechet", {"delta": 0.25}, None, "prefix", {"refresh_every": args.refresh}),
        ("frechet-dual", "frechet", {"delta": 0.25}, None, "dual", {}),
    ]
    outputs = {}
    sampling = Sampling(forbidden_token_ids=FORBIDDEN)

    def spec(steps: int | None, rule: str, params: dict, cache: str, cparams: dict) -> DecodeSpec:
        decoding = Decoding(args.gen, args.block, build_policy("blocks", steps=steps), build_rule(rule, **params),
                            build_cache(cache, **cparams))
        return DecodeSpec(decoding, sampling)

    for name, sel, params, steps, cache, cparams in settings:
        sync(device)
        t = time.perf_counter()
        out = generate(model, batch.input_ids, batch.attention_mask, spec(steps, sel, params, cache, cparams),
                       model_kwargs=batch.model_kwargs)
        sync(device)
        wall = time.perf_counter() - t
        outputs[name] = out.tokens
        forbidden_hit = bool(torch.isin(out.tokens, torch.tensor(FORBIDDEN, device=out.tokens.device)).any())
        report["runs"].append({
            "name": name, "wall_s": round(wall, 3), "nfe": [r.nfe for r in out.records],
            "gen_tokens_per_s": round(b * args.gen / wall, 2), "no_mask_left": not bool((out.tokens == model.config.mask_token_id).any()),
            "forbidden_absent": not forbidden_hit,
        })
    alone = generate(model, batch.input_ids[:1], batch.attention_mask[:1], spec(half, "topk", {}, "none", {}),
                     model_kwargs={k: v[:1] for k, v in batch.model_kwargs.items()}).tokens
    report["batched_vs_alone_agreement"] = float((alone[0] == outputs["topk-steps"][0]).float().mean())
    refreshed = generate(model, batch.input_ids, batch.attention_mask,
                         spec(half, "topk", {}, "prefix", {"refresh_every": 1}), model_kwargs=batch.model_kwargs).tokens
    report["prefix_refresh1_vs_none_agreement"] = float((refreshed == outputs["topk-steps"]).float().mean())
    if device.type == "cuda":
        report["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    checks["runs_complete"] = all(r["no_mask_left"] and r["forbidden_absent"] for r in report["runs"])
    report["ok"] = all(v for k, v in checks.items() if isinstance(v, bool))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shape", choices=("llada-v", "tiny"), default="llada-v")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--image-sizes", default="1514x720,1024x768,131x60", help="MathVista testmini pids 1-3")
    ap.add_argument("--prompt-tokens", type=int, default=120, help="text ids besides the image")
    ap.add_argument("--gen", type=int, default=96)
    ap.add_argument("--block", type=int, default=96)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--refresh", type=int, default=32, help="prefix cache refresh interval")
    ap.add_argument("--out", default=str(ROOT / "results" / "gpu_check" / "llada_v.json"))
    args = ap.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    report = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
