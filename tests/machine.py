"""Where each golden was recorded (tests/fixtures/recorded_on.json) and whether this process runs there, and the
comparisons that transfer to another machine: logits within a stated number of ulps, decisions away from ties.

Bits depend on the machine (CPU vendor and model, the instruction sets MKL and oneDNN dispatch on, library
versions) and on ATen's kernel width, not on the width alone (issue 36: an Intel Xeon differs from the AMD EPYC the
goldens were recorded on under every ATEN_CPU_CAPABILITY). ``DLLM_BENCH_FOREIGN_MACHINE=1`` makes this machine
read as another one, so that the portable assertions run here too."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from dllm_bench.machine import fingerprint, kernel_width

MANIFEST = Path(__file__).resolve().parent / "fixtures" / "recorded_on.json"
# Logits elsewhere: within this many ulps of the position's largest |logit| (in its dtype). The worst difference
# across ATEN_CPU_CAPABILITY=default/avx2/avx512 on the recording machine: float32 62 (tiny Dream), 46.5 (tiny
# LLaDA), 8.1 (tiny MoE), 5 (W @ x.T against F.linear below 12 rows); bf16 8 (tiny Dream), 4 (LLaDA), 2.5 (MoE).
# The bounds are twice the worst, rounded up to a power of two (docs/machines.md has the command).
ULPS = {torch.float32: 128, torch.bfloat16: 16}


@dataclass(frozen=True)
class Recording:
    """One golden's recording: the machine's fingerprint and the kernel widths it holds under there."""

    name: str
    machine: dict
    kernel_widths: tuple[str, ...]

    def mismatch(self) -> str | None:
        """None where this process runs on the recording machine under a recorded width, else why not."""
        here = fingerprint()
        differ = [f"{k} {here.get(k)!r} (recorded {v!r})" for k, v in self.machine.items() if here.get(k) != v]
        if differ:
            return f"{self.name} was recorded on another machine: " + ", ".join(differ)
        if kernel_width() not in self.kernel_widths:
            return f"{self.name} was recorded under kernel widths {list(self.kernel_widths)}, this run uses {kernel_width()}"
        return None

    def here(self) -> bool:
        return self.mismatch() is None


@cache
def _manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def golden_names() -> list[str]:
    """Every golden the manifest lists (fixture file names, and ``claim:...`` for bit-level claims)."""
    return list(_manifest()["goldens"])


def recording(name: str) -> Recording:
    """The recording of one golden (a fixture's file name, or a ``claim:...``)."""
    entry = _manifest()["goldens"][name]
    return Recording(name, _manifest()["machines"][entry["machine"]], tuple(entry["kernel_widths"]))


def spacing(x: torch.Tensor) -> torch.Tensor:
    """The gap from |x| to the next representable value of x's dtype (one ulp at |x|)."""
    a = x.abs()
    return torch.nextafter(a, torch.full_like(a, float("inf"))) - a


def row_ulps(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest |got - want| in ulps of the largest |want| of its row (last dimension): a logit's error scales
    with its row's magnitudes, not its own (a logit near 0 is a cancellation)."""
    scale = spacing(want.abs().amax(-1, keepdim=True)).double()
    return float(((got.double() - want.double()).abs() / scale).max())


def assert_within_ulps(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """got equals want up to the dtype's ULPS bound (ulps of each row's largest |value|)."""
    assert got.shape == want.shape and got.dtype == want.dtype, what
    worst = row_ulps(got, want)
    assert worst <= ULPS[want.dtype], f"{what}: {worst:.1f} ulps apart, bound {ULPS[want.dtype]}"


def clear_argmax(logits: torch.Tensor) -> torch.Tensor:
    """Positions whose top two logits lie further apart than twice the ulp bound: their argmax holds on any
    machine whose logits are within the bound of these."""
    top = logits.float().topk(2, dim=-1).values
    gap = (top[..., 0] - top[..., 1]).double()
    return gap > 2 * ULPS[logits.dtype] * spacing(logits.abs().amax(-1)).double()
