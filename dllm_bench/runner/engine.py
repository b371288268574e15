"""Bind a validated run config to the decoding engine: load the model once, build its policy, rule and cache."""

from __future__ import annotations

import dataclasses
import platform
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from dllm_bench.decoding import DecodeSpec, Decoding, build_cache, build_policy, build_rule, generate
from dllm_bench.models import load_model
from dllm_bench.models.compiled import compile_network, compile_seconds
from dllm_bench.models.loading import token_ids
from dllm_bench.runner.components import build_spec
from dllm_bench.runner.interface import Engine, Generation
from dllm_bench.runner.run_config import RunConfig
from dllm_bench.runner.sharding import DistContext
from dllm_bench.runner.validate import build_task
from dllm_bench.tasks.chat import encode_left_padded

# One process often runs many configs on the same weights (in-process multirun, make demo).
_MODELS: dict[tuple[str, str | None, str, bool | None, str | None, str | None, bool | str], Any] = {}


def resolve_device(requested: str | None, ctx: DistContext) -> str:
    """Device string: `cuda:<local rank>` for data-parallel GPU runs, else the config's (or the default)."""
    if requested in (None, "cuda") and torch.cuda.is_available():
        return f"cuda:{ctx.local_rank}" if ctx.world_size > 1 else "cuda"
    return requested or "cpu"


def load_cached_model(name_or_path: str, dtype: str | None, device: str,
                      rope_full_precision: bool | None = None, attention: str | None = None,
                      block_grid: str | None = None, compile: bool | str = False) -> Any:
    """`load_model` memoised per (path, dtype, device, rope_full_precision, attention, block_grid, compile); with
    ``compile`` a torch.compile mode, its layer stack compiled (models/compiled.py)."""
    key = (name_or_path, dtype, device, rope_full_precision, attention, block_grid, compile)
    if key not in _MODELS:
        model = load_model(name_or_path, dtype=dtype, device=device, rope_full_precision=rope_full_precision,
                           attention=attention, block_grid=block_grid)
        _MODELS[key] = compile_network(model, compile)
    return _MODELS[key]


def loaded_models() -> list[tuple[str, str | None, str]]:
    """(path, dtype, device) of the models this process holds."""
    return [key[:3] for key in _MODELS]


def device_name(device: str) -> str:
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"{dev.type} ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def doc_images(doc: dict) -> list[Image.Image]:
    """The images of a task document: `doc["image"]` as a path, a PIL image, a list of either, or None."""
    value = doc.get("image")
    items = value if isinstance(value, (list, tuple)) else [] if value in (None, "") else [value]
    images = []
    for item in items:
        if isinstance(item, Image.Image):
            images.append(item.convert("RGB"))
            continue
        path = Path(str(item))
        if not path.is_file():
            raise FileNotFoundError(f"image {str(path)!r} of {doc.get('sample_id')!r} is not a readable file; "
                                    "set task.image_root to the folder holding the benchmark's images")
        with Image.open(path) as im:
            images.append(im.convert("RGB"))
    return images


def _trace_dict(trace: list[Any] | None) -> dict[str, Any] | None:
    return None if trace is None else {"steps": [dataclasses.asdict(s) for s in trace]}


class DecodingEngine(Engine):
    """`dllm_bench.decoding.generate` on a loaded model, with left-padded batches and per-row seeds."""

    def __init__(self, run: RunConfig, ctx: DistContext):
        m = run.model
        self.device = resolve_device(m.device, ctx)
        self.model = load_cached_model(str(m.name_or_path), m.dtype, self.device, m.rope_full_precision, m.attention,
                                       m.block_grid, m.compile)
        self.tokenizer = self.model.tokenizer
        if self.tokenizer is None:  # a hub checkpoint without one (a local one is refused by validation)
            raise FileNotFoundError(f"model {m.name_or_path!r} has no tokenizer.json beside its weights; a run "
                                    "encodes its prompts with the checkpoint's own tokenizer")
        self.config = self.model.config
        self.stop_token_ids = tuple(self.config.stop_token_ids)
        self.device_name = device_name(self.device)
        self.run = run
        forbidden = token_ids(self.tokenizer, list(m.forbidden_tokens), "model.forbidden_tokens")
        self.spec = build_spec(run, forbidden_token_ids=forbidden, tokenizer=self.tokenizer)
        # a vision model on an image task: prompts and images become embeddings via the model's build_inputs
        self.multimodal = (bool(getattr(self.model, "accepts_images", False))
                           and build_task(run.task.as_dict()).needs_images)
        self.sequential: DecodeSpec | None = None
        if run.rule.name == "oracle":  # the reference: one token per step, no cache, nothing counted
            d = self.spec.decoding
            sequential = Decoding(d.gen_length, d.block_length, build_policy("blocks", steps=d.gen_length),
                                  build_rule("topk"), build_cache("none"), early_stop=d.early_stop)
            self.sequential = DecodeSpec(sequential, self.spec.sampling)

    def compile_seconds(self) -> float | None:
        """Seconds this process has spent compiling the model's layer stack (None: it runs eager)."""
        return compile_seconds(self.model)

    def inputs(self, prompts: list[str], docs: list[dict]) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """(ids, mask, extra generate arguments): images go through the model's own `build_inputs`."""
        if self.multimodal:
            batch = self.model.build_inputs(prompts, [doc_images(d) for d in docs], int(self.run.gen_length))
            kwargs = {"model_kwargs": batch.model_kwargs} if batch.model_kwargs else {}
            return batch.input_ids.to(self.device), batch.attention_mask.to(self.device), kwargs
        ids, mask = self.encode(prompts, bool(self.run.model.chat))
        return ids, mask, {}

    def encode(self, prompts: list[str], chat: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ids and attention mask [B, P] on the model's device (``tasks.chat.encode_left_padded``)."""
        ids, mask = encode_left_padded(self.tokenizer, prompts, chat, self.config.pad_token_id)
        return ids.to(self.device), mask.to(self.device)

    def prepare(self, prompts: list[str], docs: list[dict], seeds: list[int]) -> dict[str, Any]:
        """Untimed per-batch inputs: the oracle's reference is the sequential (one token per step) decode."""
        if self.sequential is None:
            return {}
        ids, mask, kwargs = self.inputs(prompts, docs)
        with torch.inference_mode():
            ref = generate(self.model, ids, mask, self.sequential.for_batch(seeds), **kwargs)
        return {"reference": ref.tokens}

    def generate(self, prompts: list[str], docs: list[dict], seeds: list[int], stop_strings: tuple[str, ...],
                 **extra: Any) -> list[Generation]:
        ids, mask, kwargs = self.inputs(prompts, docs)
        with torch.inference_mode():
            out = generate(self.model, ids, mask, self.spec.for_batch(seeds, stop_strings), **kwargs, **extra)
        tokens = out.tokens.tolist()
        return [Generation(ids=tokens[i], nfe=r.nfe, steps=r.steps, token_counts=dict(r.token_counts),
                           decode_time_s=r.wall_time_s, forward_positions=r.forward_positions, edits=r.edits,
                           trace=_trace_dict(r.trace))
                for i, r in enumerate(out.records)]


def build_engine(run: RunConfig, ctx: DistContext) -> DecodingEngine:
    return DecodingEngine(run, ctx)
