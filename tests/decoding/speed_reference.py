"""Tokens and NFE of fixed decodes, recorded before the engine's speed work, to prove it changed no decision.

``python tests/decoding/speed_reference.py`` rewrites ``tests/fixtures/speed_tokens.json`` (only to record a new
baseline on purpose). Two baselines: ``first100/``, ``all500/``, ``vocab/`` from before the first speed round
(described below), and ``current/`` (the first 100 puzzles) and ``current_vocab/`` recorded before the second
(outside-network time at 126k ids, weight layout): today's defaults, the mask token in the softmax denominator,
every cache mode including dLLM-Cache and Dream with prefix/dual. Covered: the shipped tiny checkpoints on the 500 held-out puzzles (every rule, LLaDA with
none/prefix/dual, Dream without a cache and its own algorithms, SlowFast, a sampled run), and the bench's
real-vocabulary shape (126 464 ids, random weights) with threshold 0.9 and Fréchet 0.25 x none/prefix/dual on a
left-padded batch. dLLM-Cache and Dream with prefix/dual are left out: their semantics are being corrected
(issue 13), so their tokens move on purpose. The baseline predates the mask token's return to the softmax
denominator (issue 13 item 11), so every decode here runs with ``confidence_mask_in_softmax=False``.

The ``current/*/*/dllm`` entries were recorded again (``--current``) when V-verify's ranking became float64 with
ties by position (issue 31): the published ``torch.topk`` over float32 similarities picked other rows under
ATEN_CPU_CAPABILITY=default, avx2 and avx512, so those decodes depended on the CPU. Every digest here must hold
under each capability (``make test-cpu-capabilities``); the ``vocab`` entries hold for avx2/avx512 only (the
bench's random weights are float32 ``normal_`` draws, which the default kernels draw differently).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
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
from dllm_bench.models import load_model  # noqa: E402
from dllm_bench.tasks.sudoku import SudokuTask  # noqa: E402
from dllm_bench.tiny.encoding import DEFAULT_GEN_LENGTH, encode_batch  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "speed_tokens.json"
CHECKPOINTS = ROOT / "dllm_bench" / "tiny" / "checkpoints"
# dLLM-Cache intervals the fixtures were recorded at (the class defaults then; conf/cache/dllm.yaml's 100/6 since)
RECORDED_CACHE_PARAMS = {"dllm": {"prompt_interval": 50, "response_interval": 7}}
TINY_BLOCK = 8
RULES = {
    "sequential": ("blocks", {"steps": DEFAULT_GEN_LENGTH}, "topk", {}),
    "threshold0.9": ("blocks", {}, "threshold", {"threshold": 0.9}),
    "threshold0.5": ("blocks", {}, "threshold", {"threshold": 0.5}),
    "factor1.0": ("blocks", {}, "factor", {"f": 1.0}),
    "factor1.0compat": ("blocks", {}, "factor", {"f": 1.0, "compat": True}),
    "frechet0.25": ("blocks", {}, "frechet", {"delta": 0.25}),
    "slowfast_code": ("slowfast", {"preset": "code"}, None, {}),
}
DREAM_ALGS = {f"dream_{alg}": ("dream", {"steps": DEFAULT_GEN_LENGTH, "alg": alg}, None, {})
              for alg in ("maskgit_plus", "topk_margin", "entropy")}
EARLIER_CONFIDENCE = Sampling(confidence_mask_in_softmax=False)
VOCAB_RULES = {"threshold0.9": ("threshold", {"threshold": 0.9}), "frechet0.25": ("frechet", {"delta": 0.25})}


def _sha(values: torch.Tensor) -> str:
    return hashlib.sha256(values.to(torch.int64).contiguous().numpy().tobytes()).hexdigest()[:16]


def digest(tokens: torch.Tensor, nfe: list[int]) -> dict:
    """Short sha256 of the answer ids (int64, row-major) and of the NFE per row, and the total NFE."""
    return {"tokens": _sha(tokens), "nfe": _sha(torch.tensor(nfe)), "nfe_total": int(sum(nfe))}


def tiny_runs(flavour: str, limit: int | None = None, current: bool = False,
              only: set[str] | None = None) -> dict[str, dict]:
    """Digests of every covered setting on one shipped checkpoint (the 500 puzzles in one batch); ``current``:
    today's confidence rule and every cache mode; ``only``: just the settings of these ``flavour/name/cache`` keys."""
    model = load_model(CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype="float32")
    rows = SudokuTask(limit=limit).docs()
    prompts, _ = encode_batch(model.tokenizer, model.config, [r["puzzle"] for r in rows],
                              [r["solution"] for r in rows], DEFAULT_GEN_LENGTH)
    settings = {**RULES, **(DREAM_ALGS if flavour == "dream" else {})}
    caches = ("none", "prefix", "dual") if flavour == "llada" else ("none",)
    confidence = EARLIER_CONFIDENCE
    if current:
        caches, confidence = ("none", "prefix", "dual", "dllm"), Sampling()
    out = {}
    for name, (policy, pparams, rule, sparams) in settings.items():
        for cache in caches if policy != "dream" else ("none",):
            if only is not None and f"{flavour}/{name}/{cache}" not in only:
                continue
            block = DEFAULT_GEN_LENGTH if policy == "dream" else TINY_BLOCK
            decoding = Decoding(DEFAULT_GEN_LENGTH, block, build_policy(policy, **pparams),
                                build_rule(rule, **sparams) if rule else None,
                                build_cache(cache, **RECORDED_CACHE_PARAMS.get(cache, {})), early_stop=True)
            res = generate(model, prompts, torch.ones_like(prompts), DecodeSpec(decoding, confidence))
            out[f"{flavour}/{name}/{cache}"] = digest(res.tokens, [r.nfe for r in res.records])
    if flavour == "llada" and (only is None or "llada/sequential_t0.7/none" in only):  # the sampled path (Gumbel noise per row)
        decoding = Decoding(DEFAULT_GEN_LENGTH, TINY_BLOCK, build_policy("blocks", steps=DEFAULT_GEN_LENGTH),
                            build_rule("topk"))
        sampling = Sampling(confidence_mask_in_softmax=confidence.confidence_mask_in_softmax, temperature=0.7,
                            seed=list(range(len(rows))))
        res = generate(model, prompts, torch.ones_like(prompts), DecodeSpec(decoding, sampling))
        out["llada/sequential_t0.7/none"] = digest(res.tokens, [r.nfe for r in res.records])
    return out


def vocab_runs(gen_length: int = 64, block: int = 32, current: bool = False) -> dict[str, dict]:
    """Digests on the bench's real-vocabulary shape: two left-padded prompts (32 and 24 ids)."""
    spec = importlib.util.spec_from_file_location("bench_script", ROOT / "scripts" / "bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    model = bench.build_model("cpu-vocab", torch.device("cpu"), torch.float32)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 126000, (2, 32), generator=g)
    mask = torch.ones_like(ids)
    ids[1, :8], mask[1, :8] = model.config.pad_token_id, 0
    out = {}
    tag, confidence = ("current_vocab", Sampling()) if current else ("vocab", EARLIER_CONFIDENCE)
    for name, (rule, params) in VOCAB_RULES.items():
        for cache in ("none", "prefix", "dual"):
            decoding = Decoding(gen_length, block, build_policy("blocks"), build_rule(rule, **params),
                                build_cache(cache))
            res = generate(model, ids, mask, DecodeSpec(decoding, confidence))
            out[f"{tag}/{name}/{cache}"] = digest(res.tokens, [r.nfe for r in res.records])
    return out


def all_runs() -> dict[str, dict]:
    """Everything the fixture holds: the first 100 puzzles (the quick test) and all 500, and the vocab shape."""
    with torch.no_grad():
        runs = {}
        for limit in (100, None):
            for flavour in ("llada", "dream"):
                tag = "first100" if limit else "all500"
                runs.update({f"{tag}/{k}": v for k, v in tiny_runs(flavour, limit).items()})
        return {**runs, **vocab_runs(), **current_runs()}


def current_runs() -> dict[str, dict]:
    """The ``current/`` and ``current_vocab/`` baselines only (``--current``: add them to the fixture as they are
    now, keeping the earlier baseline's entries)."""
    with torch.no_grad():
        runs = {}
        for flavour in ("llada", "dream"):
            runs.update({f"current/{k}": v for k, v in tiny_runs(flavour, 100, current=True).items()})
        return {**runs, **vocab_runs(current=True)}


if __name__ == "__main__":
    torch.set_num_threads(2)
    if "--current" in sys.argv:
        recorded = {k: v for k, v in json.loads(FIXTURE.read_text()).items() if not k.startswith("current")}
        runs = {**recorded, **current_runs()}
    else:
        runs = all_runs()
    FIXTURE.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")
