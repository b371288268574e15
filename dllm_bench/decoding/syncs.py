"""Count host-device syncs by op: every call that makes the host read a tensor's value, or copies a Python value
into a tensor, whatever device it runs on (so a CPU run counts what a GPU run would wait for)."""

from __future__ import annotations

from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

# ops whose result the host must read: the device has to finish first
_READS = {
    torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu,
    torch.Tensor.nonzero, torch.nonzero, torch.Tensor.argwhere, torch.argwhere,
    torch.Tensor.masked_select, torch.masked_select, torch.Tensor.bincount, torch.bincount,
    torch.Tensor.equal, torch.equal, torch.Tensor.unique, torch.unique, torch.unique_consecutive,
}
# Python values copied into a new tensor (a host-to-device copy on an accelerator)
_COPIES = {torch.tensor, torch.as_tensor}


def _name(func) -> str:
    return getattr(func, "__name__", str(func))


def _bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _list_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, list) for i in items)


def sync_kind(func, args: tuple, kwargs: dict) -> str | None:
    """The name under which a call counts as a sync, or None when it needs none."""
    if func in _READS:
        return _name(func)
    if func is torch.where and len(args) + len(kwargs) == 1:
        return "where(cond)"
    if func is torch.repeat_interleave or func is torch.Tensor.repeat_interleave:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        if isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None:
            return "repeat_interleave"
    if func in _COPIES and args and not isinstance(args[0], torch.Tensor):
        return f"{_name(func)}(python value)"
    if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and len(args) > 1:
        if _bool_index(args[1]):
            return "boolean-mask indexing"
        if _list_index(args[1]):
            return "list indexing (copy)"
    if func is torch.Tensor.to and "cpu" in (*args[1:], kwargs.get("device")):
        return "to('cpu')"  # only the literal: .to(x.device) stays on whatever device x is
    return None


class SyncCounter(TorchFunctionMode):
    """``with SyncCounter() as c: ...`` then ``c.total`` and ``c.by_op`` (a Counter of op names)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = sync_kind(func, args, kwargs)
        if kind is not None:
            self.by_op[kind] += 1
        return func(*args, **kwargs)
