"""The compiled layer stack (models/compiled.py, ``model.compile``): no graph break on the hot path, and the same
tokens and NFE as eager.

No graph break: LLaDA and Dream with no cache, prefix and dual cache decode with the stack compiled under
``fullgraph=True`` (which raises at a break) by dynamo's tracing-only ``eager`` backend: the graphs inductor would
get, at the cost of tracing alone. Same decisions: inductor's kernels (the CPU's C++ ones) against eager on a few
tiny-model puzzles per cache, float32 and bf16, and every ``current/`` golden of speed_tokens.json (exhaustive).
"""

from __future__ import annotations

import json

import pytest
import torch

from dllm_bench.decoding import (
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    build_rule,
    generate,
)
from dllm_bench.models import load_model
from dllm_bench.models.compiled import CompiledLayers, compile_network, compile_seconds, cpu_compiler_missing
from dllm_bench.tasks.sudoku import SudokuTask
from dllm_bench.tiny.encoding import DEFAULT_GEN_LENGTH, encode_batch

from . import speed_reference as ref

CACHES = ("none", "prefix", "dual")
needs_cpp = pytest.mark.skipif(cpu_compiler_missing() is not None, reason="inductor's CPU kernels need a C++ compiler")


def _model(flavour: str, dtype: str = "float32"):
    return load_model(ref.CHECKPOINTS / f"tiny_{flavour}", device="cpu", dtype=dtype)


def _decode(model, cache: str, puzzles: int) -> tuple[list[list[int]], list[int]]:
    rows = SudokuTask(limit=puzzles).docs()
    prompts, _ = encode_batch(model.tokenizer, model.config, [r["puzzle"] for r in rows],
                              [r["solution"] for r in rows], DEFAULT_GEN_LENGTH)
    decoding = Decoding(DEFAULT_GEN_LENGTH, ref.TINY_BLOCK, build_policy("blocks"),
                        build_rule("threshold", threshold=0.9), build_cache(cache), early_stop=True)
    with torch.no_grad():
        out = generate(model, prompts, torch.ones_like(prompts), DecodeSpec(decoding, Sampling()))
    return out.tokens.tolist(), [r.nfe for r in out.records]


def _fresh_compiler() -> None:
    torch._dynamo.reset()  # every case compiles its own graphs (no cache-size limit carried over)


def _one_graph_case(flavour: str, cache: str):
    # make test: LLaDA with dual cache (~15 s CPU), Dream's shifted span with prefix cache (slow); the rest exhaustive
    marks = {("llada", "dual"): [], ("dream", "prefix"): [pytest.mark.slow]}.get((flavour, cache),
                                                                                [pytest.mark.exhaustive])
    return pytest.param(flavour, cache, marks=marks, id=f"{flavour}-{cache}")


@pytest.mark.parametrize(("flavour", "cache"), [_one_graph_case(f, c) for f in ("llada", "dream") for c in CACHES])
def test_layer_stack_has_no_graph_break(flavour, cache):
    """fullgraph=True raises at the first graph break; the decode through it equals eager's."""
    model = _model(flavour)
    eager = _decode(model, cache, 2)
    _fresh_compiler()
    compile_network(model, "default", backend="eager", fullgraph=True)
    assert _decode(model, cache, 2) == eager
    stack = model.layer_stack
    assert isinstance(stack, CompiledLayers) and stack.compiles >= 1 and compile_seconds(model) == stack.compile_s > 0
    compiles = stack.compiles
    _decode(model, cache, 2)
    assert stack.compiles == compiles  # the same shapes again: nothing recompiled


def test_eager_model_reports_no_compile_time():
    model = _model("llada")
    assert compile_network(model, False) is model and compile_seconds(model) is None
    with pytest.raises(ValueError, match="compile mode 'fast'"):
        compile_network(model, "fast")


def _inductor_case(flavour: str, cache: str, dtype: str):
    # minutes of C++ compilation each on this CPU (4 min for LLaDA without a cache at load 16): exhaustive
    return pytest.param(flavour, cache, dtype, marks=[needs_cpp, pytest.mark.exhaustive], id=f"{flavour}-{cache}-{dtype}")


@pytest.mark.parametrize(("flavour", "cache", "dtype"), [
    _inductor_case(f, c, d) for d in ("float32", "bfloat16") for f in ("llada", "dream") for c in CACHES])
def test_inductor_decodes_as_eager(flavour, cache, dtype):
    model = _model(flavour, dtype)
    eager = _decode(model, cache, 4)
    _fresh_compiler()
    compile_network(model, "default")
    assert _decode(model, cache, 4) == eager


RECORDED = json.loads(ref.FIXTURE.read_text())


@pytest.mark.exhaustive
@needs_cpp
@pytest.mark.parametrize("key", [k for k in sorted(RECORDED) if k.startswith("current/") and k.endswith(CACHES)])
def test_compiled_decodes_the_goldens(key, monkeypatch):
    """speed_tokens.json's ``current/`` goldens (100 puzzles, every rule, no/prefix/dual cache) with the stack
    compiled by inductor."""
    _, flavour, name, cache = key.split("/")
    _fresh_compiler()
    monkeypatch.setattr(ref, "load_model", lambda *a, **k: compile_network(load_model(*a, **k), "default"))
    with torch.no_grad():
        got = ref.tiny_runs(flavour, 100, current=True, only={f"{flavour}/{name}/{cache}"})
    assert got[f"{flavour}/{name}/{cache}"] == RECORDED[key]


def _kv(rows: int, layers: int = 2, fill: float = 0.0):
    from dllm_bench.models import KVCache

    kv = KVCache()
    kv.keys = [torch.full((rows, 2, 6, 4), fill + i) for i in range(layers)]
    kv.values = [torch.full((rows, 2, 6, 4), -fill - i) for i in range(layers)]
    return kv


def test_static_storage_keeps_kv_at_fixed_addresses_and_never_shares_a_live_one():
    """CUDA graphs' buffers (models/compiled.StaticStorage), checked on CPU tensors: the K/V copied into marked
    buffers, adopted again without a copy, a second live storage given its own, the buffers of a finished decode
    passed to the next one, and a storage whose rows dropped holding only buffers of its new shape."""
    import gc

    from dllm_bench.models.compiled import StaticStorage

    pool = StaticStorage()
    first = _kv(3, fill=1.0)
    made = [*first.keys, *first.values]
    pool.adopt(first)
    held = [*first.keys, *first.values]
    assert all(a is not b and torch.equal(a, b) for a, b in zip(held, made, strict=True))
    assert all(getattr(t, "_dynamo_static_input_type", None) == "unguarded" for t in held)  # mark_static_address
    pool.adopt(first)
    assert all(a is b for a, b in zip([*first.keys, *first.values], held, strict=True))  # already its buffers
    second = _kv(3, fill=5.0)
    pool.adopt(second)
    assert {t.data_ptr() for t in second.keys}.isdisjoint(t.data_ptr() for t in held)
    assert torch.equal(first.keys[1], torch.full((3, 2, 6, 4), 2.0))  # untouched by the second storage
    addresses = [t.data_ptr() for t in held]
    del first, held, made
    gc.collect()
    third = _kv(3, fill=9.0)
    pool.adopt(third)  # the finished storage's buffers, now holding the new values
    assert [t.data_ptr() for t in [*third.keys, *third.values]] == addresses
    assert torch.equal(third.values[0], torch.full((3, 2, 6, 4), -9.0))
    third.keep_rows(torch.tensor([0, 2]))
    pool.adopt(third)
    assert {k[2] for k, held in pool.buffers.items() for _, h in held if h() is third} == {(2, 2, 6, 4)}


def test_static_storage_is_for_cuda_graphs_only():
    from types import SimpleNamespace

    network = SimpleNamespace(run_layers=lambda h, ctx, cache=None: h)
    stack = CompiledLayers(network, "reduce-overhead", backend="eager")
    kv, cuda, cpu = _kv(1), SimpleNamespace(device=torch.device("cuda")), torch.zeros(1)
    assert stack.keeps_storage_static(cuda, kv) and not stack.keeps_storage_static(cpu, kv)
    assert not stack.keeps_storage_static(cuda, None) and not stack.keeps_storage_static(cuda, object())
    assert not CompiledLayers(network, "default", backend="eager").keeps_storage_static(cuda, kv)


@pytest.mark.parametrize("traced", [False, pytest.param(True, marks=pytest.mark.exhaustive)],
                         ids=["untraced", "traced"])
def test_a_decode_with_static_storage_decodes_as_eager_and_reuses_its_buffers(traced):
    """The storage flow CUDA graphs take, forced on the CPU: the same tokens and NFE as eager, and a second decode of
    the same shapes writes to the first one's buffers. By default the stack's function runs untraced (the flow alone,
    ~1 s); traced by dynamo under ``fullgraph=True`` (no graph break over the marked buffers) it takes ~45 s loaded."""
    model = _model("llada")
    eager = _decode(model, "dual", 1)
    _fresh_compiler()
    stack = model.layer_stack = CompiledLayers(model, "reduce-overhead", backend="eager", fullgraph=True,
                                               static_storage=True)
    if not traced:
        stack.fn = model.run_layers
    try:
        assert _decode(model, "dual", 1) == eager
        addresses = {buf.data_ptr() for held in stack.storage.buffers.values() for buf, _ in held}
        # K and V per layer, for each storage alive at once (a block's fresh one while the last is still held)
        assert addresses and len(addresses) % (2 * model.config.n_layers) == 0
        assert _decode(model, "dual", 1) == eager
        assert {buf.data_ptr() for held in stack.storage.buffers.values() for buf, _ in held} == addresses
    finally:
        model.layer_stack = None
