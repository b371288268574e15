"""Whether reading a tensor's value on the host is free: the one device check behind every CPU-only speed trick.

On the CPU a host read (``bool``, ``.item()``, ``nonzero``, ``torch.equal``) costs nothing beyond the op, so
some code paths use one to skip work; on an accelerator the same read waits for the device (a sync), so those
paths take a read-free route there, as does code being compiled (a host read would break its graph).
:func:`accelerator_path` makes CPU tensors take the accelerator's route, so
that the CPU tests can count its syncs and check that both routes give the same bits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

_forced_accelerator = False


def host_reads_free(device: torch.device) -> bool:
    """True where a host read of a tensor on ``device`` needs no device sync (the CPU, unless forced off)."""
    return device.type == "cpu" and not _forced_accelerator and not torch.compiler.is_compiling()


@contextmanager
def accelerator_path() -> Iterator[None]:
    """Inside: CPU tensors take the accelerator's code path (no host reads for speed)."""
    global _forced_accelerator
    before, _forced_accelerator = _forced_accelerator, True
    try:
        yield
    finally:
        _forced_accelerator = before
