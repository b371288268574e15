"""Our network with load_model's defaults against logits recorded from the published model files.

tests/fixtures/bf16_logits_published.json holds, per ATen kernel width, flavour and dtype, a digest of what
Fast-dLLM's ``modeling_dream.py`` / ``modeling_llada.py`` compute on the committed tiny checkpoints (how it was
recorded: the file's ``note``): matrix products round differently under ``ATEN_CPU_CAPABILITY=default``, ``avx2``
and ``avx512``, so each width has its own published bits, and ours must equal those of the width it runs on. The canvases are decoded here as one batch: the published run took them one at a time, so
equality also shows that batching changes no bit. The bits are the recording machine's (tests/fixtures/recorded_on.json): on
another machine the probes are compared within tests/machine.py's ulp bound and the argmax where it is clear.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from dllm_bench.models import load_model
from tests.machine import ULPS, clear_argmax, recording, spacing

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bf16_logits_published.json"
CHECKPOINTS = Path(__file__).resolve().parents[2] / "dllm_bench" / "tiny" / "checkpoints"
GOLDEN = json.loads(FIXTURE.read_text())
RECORDED = recording(FIXTURE.name)


def _sha256(logits: torch.Tensor) -> str:
    bits = logits.contiguous().view(torch.int16 if logits.dtype == torch.bfloat16 else torch.int32)
    return hashlib.sha256(bits.numpy().tobytes()).hexdigest()


def _logits(flavour: str, dtype: torch.dtype, **kwargs) -> torch.Tensor:
    model = load_model(CHECKPOINTS / f"tiny_{flavour}", dtype=dtype, device="cpu", **kwargs)
    with torch.no_grad():
        return model(torch.tensor(GOLDEN["flavours"][flavour]["canvases"]))


def _published(flavour: str, dtype: str) -> list[dict]:
    """The published file's digests under this CPU's kernel width (recorded for default, avx2 and avx512; another
    width, on another architecture, is compared with the default width's within the ulp bound)."""
    here = torch.backends.cpu.get_cpu_capability()
    return GOLDEN["capabilities"].get(here, GOLDEN["capabilities"]["DEFAULT"])[flavour][dtype]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_default_logits_are_the_published_bits(flavour: str, dtype: str) -> None:
    golden = _published(flavour, dtype)
    logits = _logits(flavour, getattr(torch, dtype))
    assert len(golden) == logits.shape[0]
    if RECORDED.here():
        for i, (row, want) in enumerate(zip(logits, golden)):
            assert row.argmax(-1).tolist() == want["argmax"], f"canvas {i}: argmax differs"
            assert [float(row[p, k]) for p, k, _ in want["probes"]] == [v for _, _, v in want["probes"]], f"canvas {i}"
            assert _sha256(row) == want["sha256"], f"canvas {i}: logits differ from the published model's"
        return
    # another machine: the probes within the ulp bound of their position's largest logit, the clear argmaxes
    bound = ULPS[logits.dtype]
    for i, (row, want) in enumerate(zip(logits, golden)):
        clear = clear_argmax(row)
        assert clear.float().mean() > 0.5, f"canvas {i}: most argmaxes should be clear of the bound"
        got = row.argmax(-1)
        assert all(int(got[p]) == a for p, a in enumerate(want["argmax"]) if clear[p]), f"canvas {i}: argmax"
        for p, k, v in want["probes"]:
            ulps = abs(float(row[p, k]) - v) / float(spacing(row[p].abs().amax()))
            assert ulps <= bound, f"canvas {i} probe ({p}, {k}): {float(row[p, k])} vs {v}, {ulps:.1f} ulps > {bound}"


def test_float32_rotation_switch_leaves_the_published_dream_bits() -> None:
    """``rope_full_precision=True`` is the documented way back to float32 rotation; in bf16 it changes Dream's
    logits (the published file rotates in the model dtype; elsewhere than where it was recorded, compared with
    our default logits, which hold the published bits there)."""
    golden = _published("dream", "bfloat16")
    logits = _logits("dream", torch.bfloat16, rope_full_precision=True)
    if RECORDED.here():
        differ = sum(_sha256(row) != want["sha256"] for row, want in zip(logits, golden))
    else:
        default = _logits("dream", torch.bfloat16)
        differ = sum(not torch.equal(row, want) for row, want in zip(logits, default))
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
