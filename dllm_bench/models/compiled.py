"""The network's layer stack under ``torch.compile`` (``model.compile``): one switch, the seconds it cost.

What is compiled is :meth:`DiffusionLM.run_layers`, the residual stream through every layer (and through a cache's
``run_layer``): its shapes are fixed within a block (batch rows, span, canvas), so a GPU can capture it in CUDA
graphs (``mode="reduce-overhead"``). The rest of a forward stays eager: the checks and rotary memo before it, and
the LM head after it, whose row count is the step's candidate count (data-dependent, one host read a step).

Without graph breaks on the hot path: LLaDA and Dream with no cache, prefix and dual cache trace as one graph
each (tests/decoding/test_compiled.py compiles them with ``fullgraph=True``). In a run the stack compiles with
``fullgraph=False``, so a cache that reads the host inside a layer still decodes (in pieces). A compile happens on
the first call of each new shape; the time of those calls is kept (:attr:`CompiledLayers.compile_s`), so the
runner reports it and keeps it out of the timed batches' figures.

Under CUDA graphs (``reduce-overhead`` on a CUDA device) a replay may write in place only into inputs at fixed
addresses (parameters, and tensors marked with ``torch._dynamo.mark_static_address``; any other mutated input makes
inductor run that graph without CUDA graphs), and the tensors a captured graph allocates live in the graphs' memory
pool, where a later replay may overwrite them. So the K/V a storage writes in place (``graph_storage()``: the
Fast-dLLM KV storage) are kept in buffers owned here, marked static: the first forward's K/V, allocated inside the
graph, are copied out after the call, and a tensor made outside (rows dropped as they finish) is copied in before the
next one. The buffers outlive a decode, so the next decode of the same shapes (a timed one after its warm-up) writes
to the same addresses and replays the captured graphs instead of recording them again. The CPU path never does this.
"""

from __future__ import annotations

import shutil
import time
import weakref
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

    def __init__(self, model: Any, mode: str, backend: str = "inductor", fullgraph: bool = False,
                 static_storage: bool | None = None) -> None:
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
        # the storage's in-place tensors in fixed-address buffers: None = where CUDA graphs run (reduce-overhead, CUDA)
        self.static_storage = static_storage
        self.storage = StaticStorage()

    def keeps_storage_static(self, h: torch.Tensor, cache: Any) -> bool:
        """Whether this call's storage goes into fixed-address buffers (CUDA graphs; never on the CPU by default)."""
        if cache is None or not hasattr(cache, "graph_storage"):
            return False
        if self.static_storage is not None:
            return self.static_storage
        return self.mode == "reduce-overhead" and h.device.type == "cuda"

    def __call__(self, h: torch.Tensor, ctx: Any, cache: Any = None) -> torch.Tensor:
        static = self.keeps_storage_static(h, cache)
        if static:
            self.storage.adopt(cache)  # tensors made outside the graphs since the last call (rows dropped)
        before = _graphs_compiled()
        start = time.perf_counter()
        out = self.fn(h, ctx, cache)
        if static:
            self.storage.adopt(cache)  # a first forward's K/V, allocated in the graphs' pool
        if _graphs_compiled() != before:
            if out.device.type == "cuda":
                torch.cuda.synchronize(out.device)
            self.compile_s += time.perf_counter() - start
            self.compiles += _graphs_compiled() - before
        return out


class StaticStorage:
    """Fixed-address buffers (marked ``mark_static_address``) for a storage's in-place tensors, per (list, layer,
    shape, dtype, device); a buffer passes to another storage only once its holder is gone, so two live storages
    never share one. A storage whose rows dropped gives up its buffers of the larger shape."""

    def __init__(self) -> None:
        # key -> [(buffer, its holder: a weak reference to the storage)]
        self.buffers: dict[tuple, list[tuple[torch.Tensor, weakref.ref]]] = {}

    def adopt(self, cache: Any) -> None:
        """Put every tensor of ``cache.graph_storage()`` (lists of per-layer tensors, replaced in place) into a
        buffer of this pool: the same tensor when it already is one, else a copy."""
        for slot, store in enumerate(cache.graph_storage()):
            for i, t in enumerate(store):
                key = (slot, i, tuple(t.shape), t.dtype, t.device)
                entries = self.buffers.setdefault(key, [])
                if any(buf is t for buf, _ in entries):
                    continue
                free = [n for n, (_, holder) in enumerate(entries) if holder() in (None, cache)]
                if free:
                    buf = entries.pop(free[0])[0]
                else:
                    buf = torch.empty(t.shape, dtype=t.dtype, device=t.device)
                    torch._dynamo.mark_static_address(buf)
                buf.copy_(t)
                store[i] = buf
                entries.append((buf, weakref.ref(cache)))
                for other, held in self.buffers.items():  # this storage's buffers of its former shape
                    if other[:2] == key[:2] and other != key:
                        held[:] = [(b, h) for b, h in held if h() is not cache]


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
