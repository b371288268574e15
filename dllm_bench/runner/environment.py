"""What a run ran on: package and library versions, torch/CUDA, device, git commit, host."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

LIBRARIES = ("dllm-bench", "torch", "transformers", "tokenizers", "safetensors", "hydra-core", "omegaconf",
             "numpy", "accelerate", "lm-eval", "math-verify")
SCORING_LIBRARIES = ("math-verify",)  # scores depend on its version (MATH gold: 4029 of 5000 with 0.9.0, 4026 with 0.7.0)
REPO_DIR = Path(__file__).resolve().parents[2]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """HEAD of the checkout the package runs from, with `-dirty` when tracked files changed."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_DIR, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_DIR,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average (runnable processes, ours included); None where the OS reports none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return None


def is_loaded(loads: list[float | None], cpus: int) -> bool | None:
    """Whether throughput was measured on a loaded machine: a load average above the CPU count (processes
    queued for CPUs) at the start or end of a run; None when no load average was recorded."""
    known = [x for x in loads if x is not None]
    return max(known) > cpus if known else None


def scoring_versions() -> dict[str, str | None]:
    """Versions of the libraries that decide verdicts in this process (recorded where a run is scored)."""
    return {name: _version(name) for name in SCORING_LIBRARIES}


def environment_info() -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "versions": {name: _version(name) for name in LIBRARIES},
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "cuda_available": cuda,
        "gpu_names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "cpu_count": os.cpu_count(),
        "git_commit": git_commit(),
    }
