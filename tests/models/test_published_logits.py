"""Our network with load_model's defaults against logits recorded from the published model files.

tests/fixtures/bf16_logits_published.json holds, per ATen kernel width, flavour and dtype, a digest of what
Fast-dLLM's ``modeling_dream.py`` / ``modeling_llada.py`` compute on the committed tiny checkpoints (how it was
recorded: the file's ``note``): matrix products round differently under ``ATEN_CPU_CAPABILITY=default``, ``avx2``
and ``avx512``, so each width has its own published bits, and ours must equal those of the width it runs on. The canvases are decoded here as one batch: the published run took them one at a time, so
equality also shows that batching changes no bit.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from dllm_bench.models import load_model

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bf16_logits_published.json"
CHECKPOINTS = Path(__file__).resolve().parents[2] / "dllm_bench" / "tiny" / "checkpoints"
GOLDEN = json.loads(FIXTURE.read_text())


def _sha256(logits: torch.Tensor) -> str:
    bits = logits.contiguous().view(torch.int16 if logits.dtype == torch.bfloat16 else torch.int32)
    return hashlib.sha256(bits.numpy().tobytes()).hexdigest()


def _logits(flavour: str, dtype: torch.dtype, **kwargs) -> torch.Tensor:
    model = load_model(CHECKPOINTS / f"tiny_{flavour}", dtype=dtype, device="cpu", **kwargs)
    with torch.no_grad():
        return model(torch.tensor(GOLDEN["flavours"][flavour]["canvases"]))


def _published(flavour: str, dtype: str) -> list[dict]:
    """The published file's digests under this CPU's kernel width (recorded for default, avx2 and avx512)."""
    here = torch.backends.cpu.get_cpu_capability()
    if here not in GOLDEN["capabilities"]:
        pytest.skip(f"goldens were recorded under {sorted(GOLDEN['capabilities'])} kernels, this CPU runs {here}")
    return GOLDEN["capabilities"][here][flavour][dtype]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_default_logits_are_the_published_bits(flavour: str, dtype: str) -> None:
    golden = _published(flavour, dtype)
    logits = _logits(flavour, getattr(torch, dtype))
    assert len(golden) == logits.shape[0]
    for i, (row, want) in enumerate(zip(logits, golden)):
        assert row.argmax(-1).tolist() == want["argmax"], f"canvas {i}: argmax differs"
        assert [float(row[p, k]) for p, k, _ in want["probes"]] == [v for _, _, v in want["probes"]], f"canvas {i}"
        assert _sha256(row) == want["sha256"], f"canvas {i}: logits differ from the published model's"


def test_float32_rotation_switch_leaves_the_published_dream_bits() -> None:
    """``rope_full_precision=True`` is the documented way back to float32 rotation; in bf16 it changes Dream's
    logits (the published file rotates in the model dtype)."""
    golden = _published("dream", "bfloat16")
    logits = _logits("dream", torch.bfloat16, rope_full_precision=True)
    differ = sum(_sha256(row) != want["sha256"] for row, want in zip(logits, golden))
    assert differ == len(golden)


def test_rotation_precision_comes_from_the_checkpoint(tmp_path: Path) -> None:
    """LLaDA reads ``rope_full_precision`` from config.json (default true); Dream rotates in the model dtype."""
    assert load_model(CHECKPOINTS / "tiny_llada", device="meta").config.rope_full_precision is True
    assert load_model(CHECKPOINTS / "tiny_dream", device="meta").config.rope_full_precision is False
    assert load_model(CHECKPOINTS / "tiny_dream", device="meta", rope_full_precision=True).config.rope_full_precision
    ckpt = tmp_path / "llada"
    ckpt.mkdir()
    for f in (CHECKPOINTS / "tiny_llada").iterdir():
        (ckpt / f.name).symlink_to(f)
    cfg = json.loads((CHECKPOINTS / "tiny_llada" / "config.json").read_text())
    (ckpt / "config.json").unlink()
    (ckpt / "config.json").write_text(json.dumps({**cfg, "rope_full_precision": False}))
    assert load_model(ckpt, device="meta").config.rope_full_precision is False
