"""The machine a bit-level result was computed on: the CPU, the instruction sets MKL and oneDNN dispatch on, and the
library versions. Two runs with the same fingerprint and ATen kernel width give the same bits; across fingerprints
only what transfers (values within some ulps, decisions away from near-ties) can be compared (issue 36)."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

import torch

# set to 1, every fingerprint reads as another machine's: runs what a foreign machine runs, here
FOREIGN_ENV = "DLLM_BENCH_FOREIGN_MACHINE"
# cpuinfo flags on which MKL's and oneDNN's kernel choice depends (AMX and AVX-512 BF16/FP16 paths, VNNI)
DISPATCH_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
                  "amx_tile", "amx_bf16", "amx_int8")


def _cpuinfo() -> tuple[str, set[str]]:
    """(vendor and model name, flags) from /proc/cpuinfo; the platform's processor string elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), set()
    fields = {k: v for k, v in reversed(re.findall(r"^(vendor_id|model name|flags)\s*:\s*(.*)$", text, re.M))}
    cpu = " ".join(v for v in (fields.get("vendor_id"), fields.get("model name")) if v) or platform.machine()
    return cpu.strip(), set(fields.get("flags", "").split())


def _library_version(pattern: str) -> str | None:
    found = re.search(pattern, torch.__config__.show())
    return found.group(1) if found else None


def foreign() -> bool:
    """Whether DLLM_BENCH_FOREIGN_MACHINE asks this process to act as another machine (1) or not (unset, 0)."""
    value = os.environ.get(FOREIGN_ENV, "0")
    if value not in ("0", "1"):
        raise ValueError(f"{FOREIGN_ENV}={value!r}: allowed are 0 and 1")
    return value == "1"


def fingerprint() -> dict[str, str | None]:
    """CPU vendor and model, its dispatch-relevant instruction sets, torch, MKL and oneDNN versions (None where
    torch was built without them). The kernel width is apart: ``kernel_width()``."""
    cpu, flags = _cpuinfo()
    if foreign():
        cpu = f"foreign ({FOREIGN_ENV}=1) {cpu}"
    return {"cpu": cpu, "isa": " ".join(f for f in DISPATCH_FLAGS if f in flags), "torch": torch.__version__,
            "mkl": _library_version(r"Math Kernel Library Version (\S+)") if torch.backends.mkl.is_available() else None,
            "onednn": _library_version(r"MKL-DNN v(\S+)") if torch.backends.mkldnn.is_available() else None}


def kernel_width() -> str:
    """The SIMD width of ATen's CPU kernels in this process (ATEN_CPU_CAPABILITY or the CPU's own): default, avx2,
    avx512."""
    return torch.backends.cpu.get_cpu_capability().lower()
