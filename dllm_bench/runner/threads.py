"""The CPU thread count of a run: the config's `num_threads`, else one picked for the machine and the model.

A tiny model's matrix products are too small to split: with two or more threads each op pays the threads'
wake-up and join for microseconds of work, and on a shared machine a busy core stalls every step (measured
in docs/runner.md: 1 thread is 10-30x faster for the embedded models). A large model's products are worth
splitting over every CPU the process may use.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dllm_bench.runner.environment import cpu_count

# Weight files below this size count as small (the embedded models: 3.4 and 4.8 MB; an 8B model: ~16 GB).
SMALL_MODEL_BYTES = 64 * 2**20
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


def weight_bytes(name_or_path: str) -> int | None:
    """Total size of a local checkpoint's weight files; None for a hub id (not downloaded yet, and large)."""
    folder = Path(name_or_path)
    if not folder.is_dir():
        return None
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())


def pick_num_threads(requested: int | None, name_or_path: str, cpus: int | None = None) -> int:
    """`requested` when set; else 1 for a small local checkpoint and every usable CPU for any other."""
    if requested is not None:
        return int(requested)
    size = weight_bytes(name_or_path)
    if size is not None and size < SMALL_MODEL_BYTES:
        return 1
    return cpus or cpu_count()


def apply_num_threads(requested: int | None, name_or_path: str) -> int:
    """Set torch's intra-op thread count for this run; returns the count set (recorded in run.json)."""
    threads = pick_num_threads(requested, name_or_path)
    torch.set_num_threads(threads)
    return threads
