"""Fast-dLLM v2, SDAR and LLaDA2 networks against logits recorded from their published modeling files on the tiny
checkpoints of :func:`~dllm_bench.models.tiny_blocks.make_random_block_checkpoint` (seed 0).

tests/fixtures/block_published_logits.safetensors: how it was recorded (sources with commits, the CPU shims, the
call) is in its metadata, with the recording machine's fingerprint (CPU model, torch version, ATen kernel width). Bits
are asserted where this machine has that fingerprint and the two computations are the same kernels; agreement to
rounding elsewhere, and where the published call takes another SDPA path than ours on the same values:

- SDAR's own ``generate.py`` passes its block mask at rank 3 ([1, S, S]): torch's CPU SDPA then takes another
  kernel than for the same mask at rank 4 (which gives the published bits exactly);
- a block forward over the published K/V cache: Fast-dLLM v2 runs the block's 4 queries where ours also runs the
  committed position before it (for the shifted first logit); SDAR's block attends with flash-attn (no mask) where
  ours passes an all-true mask;
- LLaDA2 in float32: the routed experts' SiLU runs over all routed rows at once here, per expert there (vectorised
  and scalar tails round differently); bf16 hides it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from dllm_bench.models import load_model
from dllm_bench.models.cache import CommittedBlockCache
from dllm_bench.models.tiny_blocks import FORMATS, make_random_block_checkpoint
from tests.decoding.published_goldens import weights_sha256
from tests.machine import recording

GOLDEN = Path(__file__).parents[1] / "fixtures" / "block_published_logits.safetensors"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TOL = {"float32": 1e-5, "bfloat16": 3e-2}


@pytest.fixture(scope="module")
def golden() -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    with safe_open(str(GOLDEN), "pt") as f:
        meta = f.metadata()
    return meta, load_file(str(GOLDEN))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory, golden) -> dict[str, Path]:
    meta, _ = golden
    root = tmp_path_factory.mktemp("blocks")
    out = {}
    for fmt in FORMATS:
        out[fmt] = make_random_block_checkpoint(root / fmt, fmt, seed=0)
        assert weights_sha256(out[fmt]) == meta[f"weights_sha256_{fmt}"], f"the tiny {fmt} weights changed: re-record"
    return out


def _same_machine(meta: dict[str, str]) -> bool:
    """Bits hold where the fixture was recorded (tests/fixtures/recorded_on.json); ``meta`` keeps its own copy."""
    return recording("block_published_logits.safetensors").here()


def _check(got: torch.Tensor, want: torch.Tensor, dn: str, bits: bool) -> None:
    if bits:
        assert torch.equal(got.float(), want.float()), f"max |diff| {(got.float() - want.float()).abs().max()}"
    else:
        torch.testing.assert_close(got.float(), want.float(), rtol=TOL[dn], atol=TOL[dn])


@pytest.mark.parametrize("dn", list(DTYPES))
def test_fast_dllm_v2_canvas_logits_are_the_published_ones_shifted(golden, checkpoints, dn):
    """Fast-dLLM v2's logit at i predicts token i+1; ours at i predicts token i (from state i-1)."""
    meta, g = golden
    model = load_model(checkpoints["fast_dllm_v2"], dtype=DTYPES[dn], device="cpu")
    with torch.no_grad():
        ours = model(g["input_ids"])
    _check(ours[:, 1:], g[f"fast_dllm_v2_{dn}"][:, :-1], dn, bits=_same_machine(meta))


@pytest.mark.parametrize("dn", list(DTYPES))
def test_fast_dllm_v2_committed_block_cache_matches_the_published_cache(golden, checkpoints, dn):
    meta, g = golden
    ids = g["input_ids"]
    model = load_model(checkpoints["fast_dllm_v2"], dtype=DTYPES[dn], device="cpu")
    cache = CommittedBlockCache()
    cache.commit_next()
    with torch.no_grad():
        prefix = model(ids[:, :8], cache=cache)
        block = model(ids[:, 8:12], cache=cache, start=8)
    _check(prefix[:, 1:], g[f"fast_dllm_v2_{dn}_prefix"][:, :-1], dn, bits=_same_machine(meta))
    _check(block[:, 1:], g[f"fast_dllm_v2_{dn}_block"][:, :-1], dn, bits=False)
    # the block's first token is predicted by the committed prefix's last state (their prefix forward's last logit)
    _check(block[:, 0], g[f"fast_dllm_v2_{dn}_prefix"][:, -1], dn, bits=False)


@pytest.mark.parametrize("dn", list(DTYPES))
def test_sdar_logits_are_the_published_ones(golden, checkpoints, dn):
    meta, g = golden
    ids = g["input_ids"]
    model = load_model(checkpoints["sdar"], dtype=DTYPES[dn], device="cpu")
    cache = CommittedBlockCache()
    cache.commit_next()
    with torch.no_grad():
        ours = model(ids)
        model(ids[:, :8], cache=cache)
        block = model(ids[:, 8:12], cache=cache, start=8)
    _check(ours, g[f"sdar_{dn}"], dn, bits=_same_machine(meta))
    _check(ours, g[f"sdar_{dn}_rank3"], dn, bits=False)
    _check(block, g[f"sdar_{dn}_block"], dn, bits=False)


def test_sdar_norm_rounding_switch_is_wired(golden, checkpoints):
    """SDAR's norms round once (flash-attn's fused kernel): with Qwen's own RMSNorm the bf16 logits leave the
    published bits (float32 is the same either way)."""
    meta, g = golden
    model = load_model(checkpoints["sdar"], dtype=torch.bfloat16, device="cpu")
    model.config.norm_rounds_once = False
    from dllm_bench.models.qwen import QwenDiffusionLM

    plain = QwenDiffusionLM(model.config).to(torch.bfloat16)
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert not torch.equal(plain(g["input_ids"]), g["sdar_bfloat16"])


@pytest.mark.parametrize("dn", list(DTYPES))
def test_llada2_logits_are_the_published_ones(golden, checkpoints, dn):
    meta, g = golden
    model = load_model(checkpoints["llada2"], dtype=DTYPES[dn], device="cpu")
    with torch.no_grad():
        ours = model(g["input_ids"])
    _check(ours, g[f"llada2_{dn}"], dn, bits=_same_machine(meta) and dn == "bfloat16")


@pytest.mark.parametrize("dn", list(DTYPES))
def test_fast_dllm_v2_sub_block_cache_is_the_published_block_cache(golden, checkpoints, dn):
    """The open block (Fast-dLLM v2's ``use_block_cache``): the block's forward stores its K/V uncommitted, a
    sub-block's forward overwrites its positions there and attends the prefix and the whole block; ``raw_logits``
    gives the logits as the model file returns them (token i+1 at i), which its loop shifts within each window."""
    meta, g = golden
    ids = g["input_ids"]
    model = load_model(checkpoints["fast_dllm_v2"], dtype=DTYPES[dn], device="cpu")
    cache = CommittedBlockCache()
    with torch.no_grad():
        cache.commit_next()
        model(ids[:, :8], cache=cache)
        cache.open_block()
        block = model(ids[:, 8:12], cache=cache, start=8, raw_logits=True)
        sub = model(ids[:, 10:12], cache=cache, start=10, raw_logits=True)
    assert (cache.committed, cache.length) == (8, 12)
    _check(block, g[f"fast_dllm_v2_{dn}_openblock"], dn, bits=_same_machine(meta))
    _check(sub, g[f"fast_dllm_v2_{dn}_subblock"], dn, bits=_same_machine(meta))
