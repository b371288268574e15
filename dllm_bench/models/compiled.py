"""The network's layer stack under ``torch.compile`` (``model.compile``): one switch, the seconds it cost.

What is compiled is :meth:`DiffusionLM.run_layers`, the residual stream through every layer (and through a cache's
``run_layer``): its shapes are fixed within a block (batch rows, span, canvas), so a GPU can capture it in CUDA
graphs (``mode="reduce-overhead"``). The rest of a forward stays eager: the checks and rotary memo before it, and
the LM head after it, whose row count is the step's candidate count (data-dependent, one host read a step).

Without graph breaks on the hot path: LLaDA and Dream with no cache, prefix and dual cache trace as one graph
each (tests/models/test_compiled.py compiles them with ``fullgraph=True``). In a run the stack compiles with
``fullgraph=False``, so a cache that reads the host inside a layer still decodes (in pieces). A compile happens on
the first call of each new shape; the time of those calls is kept (:attr:`CompiledLayers.compile_s`), so the
runner reports it and keeps it out of the timed batches' figures.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import torch
import torch._dynamo.utils
import torch._inductor.config

# model.compile's values: False (eager, the default: ModelSettings.compile) or a torch.compile mode
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
# graphs per code object before dynamo falls back to eager (its default 8): one decode meets a first full forward,
# then batch sizes as rows finish and spans per block (symbolic after their second value), per cache
RECOMPILE_LIMIT = 64


def cpu_compiler_missing() -> str | None:
    """Why inductor cannot build CPU kernels here (no C++ compiler on PATH), or None."""
    if any(shutil.which(name) for name in ("g++", "c++", "clang++")):
        return None
    return "torch.compile's CPU kernels need a C++ compiler (g++, c++ or clang++) on PATH"


def _graphs_compiled() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


class CompiledLayers:
    """``model.run_layers`` compiled; a call that compiled a graph adds its seconds to :attr:`compile_s`."""

    def __init__(self, model: Any, mode: str, backend: str = "inductor", fullgraph: bool = False) -> None:
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile mode {mode!r} is not one of {COMPILE_MODES}")
        # inductor takes a mode; another backend (the tests' "eager": tracing only) takes none
        options = {"mode": mode} if backend == "inductor" else {}
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        # fused bf16/fp16 kernels round every intermediate to the dtype, as the eager ops do (not float32 inside)
        torch._inductor.config.emulate_precision_casts = True
        self.fn = torch.compile(model.run_layers, backend=backend, fullgraph=fullgraph, **options)
        self.mode, self.backend = mode, backend
        self.compile_s = 0.0  # seconds of the calls that compiled (their run included)
        self.compiles = 0  # graphs compiled by those calls

    def __call__(self, h: torch.Tensor, ctx: Any, cache: Any = None) -> torch.Tensor:
        before = _graphs_compiled()
        start = time.perf_counter()
        out = self.fn(h, ctx, cache)
        if _graphs_compiled() != before:
            if out.device.type == "cuda":
                torch.cuda.synchronize(out.device)
            self.compile_s += time.perf_counter() - start
            self.compiles += _graphs_compiled() - before
        return out


def compile_network(model: Any, mode: str | bool | None, backend: str = "inductor", fullgraph: bool = False) -> Any:
    """Put the compiled layer stack in ``model`` (in place; returned): ``mode`` False/None leaves it eager."""
    if mode in (None, False):
        return model
    net = getattr(model, "language_model", model)  # LLaDA-V: its language model's stack
    net.layer_stack = CompiledLayers(net, str(mode), backend, fullgraph)
    return model


def compile_seconds(model: Any) -> float | None:
    """Seconds spent compiling ``model``'s layer stack so far, None when it runs eager."""
    stack = getattr(getattr(model, "language_model", model), "layer_stack", None)
    return stack.compile_s if isinstance(stack, CompiledLayers) else None
