"""What a decoding cache is: the ``Cache`` protocol, the forward plan it hands the runner, and the registry.

A cache is one file in this package: a frozen dataclass whose fields are its parameters (their defaults are the
published defaults, the one place they live), registered with ``@register``; its storage is one file in
:mod:`dllm_bench.models.cache` and its parameters are ``conf/cache/<name>.yaml``. The dataclass holds the cache's
checks (``check``, ``check_combination``) and opens one :class:`CacheSession` per decode, which holds everything
a decode changes: its schedule (when to refresh what), its plan (which rows and which query positions each forward
computes, per row), its storage objects and its accounting (the forward positions of each forward; every active
row counts one NFE per step). :class:`~dllm_bench.decoding.forward.ForwardRunner` runs the plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from dllm_bench.decoding.params import Registry
from dllm_bench.models.cache import Storage


@dataclass
class HostView:
    """What the host knows of a step before it runs, from one read at the end of the previous step: the active
    rows and every row's block bounds and canvas limit (answer coordinates) and masked answer positions."""

    rows: list[int]
    block_lo: list[int]
    block_hi: list[int]
    limit: list[int] | None = None
    masked: list[int] | None = None  # per row: answer positions still masked (None where the caller gives none)
    # [B, G] float on the device, where the rule knows the step's commits before its forward (rule random_order):
    # its ranking score at each position the step will commit (the higher, the earlier in its order), -inf elsewhere
    planned: torch.Tensor | None = None


@dataclass
class Canvas:
    """What a cache session knows of its decode's canvas: prompt length P (left-padded), canvas length T = P + G."""

    prompt_length: int
    length: int
    prompt_real: torch.Tensor  # [B] long: each row's real prompt tokens (no left padding)
    shift: int  # 1 where logits are shifted (Dream): a span starting inside the canvas also computes start - 1
    mask_token_id: int
    model: Any = None  # the network (a cache that reads its own logits: d2Cache's first-step confidence)


class StepRows:
    """Device row indices for host row lists, reusing the step's active rows tensor (no copy for the usual case)."""

    def __init__(self, host_rows: list[int], rows: torch.Tensor) -> None:
        self.host_rows, self.rows = host_rows, rows

    def device(self, host_rows: list[int]) -> torch.Tensor:
        if host_rows == self.host_rows:
            return self.rows
        return torch.tensor(host_rows, dtype=torch.long, device=self.rows.device)


@dataclass
class Forward:
    """One network call of a step: its rows, its storage, its queries and what it counts.

    Queries: canvas positions ``[start, end)`` (end None = the canvas; a span that starts at 0 and ends at the
    canvas is a full forward, which fills an empty storage), or ``positions`` [b, Q], ascending per row (the
    network then takes them through ``query_positions``). ``cut``: ``end`` is the canvas length the network sees
    (SlowFast's truncated fast phase). Forward positions of each row: its real prompt tokens when
    ``count_prompt``, plus ``count`` (an int, or [b] long per row).
    """

    rows: torch.Tensor  # [b] global row indices on the device
    storage: Storage | None  # None: a plain forward, nothing stored
    refresh: bool  # every query position of the canvas recomputed (a refresh, for Fast-dLLM's Dream compat)
    count: int | torch.Tensor
    count_prompt: bool = False
    start: int = 0
    end: int | None = None
    positions: torch.Tensor | None = None
    cut: bool = False
    unqueried_zero: bool = False  # candidates outside ``positions`` get zero logits (d2Cache's published forward)


@runtime_checkable
class CacheSession(Protocol):
    """One decode's cache: schedule, plan, storage and accounting."""

    def forwards(self, view: HostView, rows: StepRows, ids: torch.Tensor) -> Iterator[Forward]:
        """The step's forwards for the active rows of ``view`` over the canvas ``ids`` [B, T] (the tokens before
        this step's commit, on the device); run in the order they are yielded (the session may set its storage
        up between them, and read what the last one left there); every active row is in one, or in a later one
        too, whose logits then replace the earlier's (Elastic-Cache's refresh)."""


@runtime_checkable
class Cache(Protocol):
    """A cache: its parameters, what it allows, and one session per decode."""

    name: ClassVar[str]
    stateless: ClassVar[bool]  # stores nothing: every forward computes all it returns (CFG, dream_threshold)
    shorter_canvas: ClassVar[bool]  # its forwards may see the canvas cut at a policy's limit (SlowFast)
    stores: ClassVar[tuple[str, ...]]  # what its storage holds per layer and canvas position: of k, v, attn, ffn
    flavours: ClassVar[tuple[str, ...]]  # the model flavours (llada, dream) it runs on (the runner refuses others)

    @property
    def force_first(self) -> bool:
        """A refresh forward commits only the block's first position (Fast-dLLM's Dream loop with a cache)."""

    def adjust_commit(self, commit: torch.Tensor, candidates: torch.Tensor, refreshed: torch.Tensor,
                      block_lo: torch.Tensor) -> torch.Tensor:
        """The step's commit mask [B, G] given which rows' forward was a refresh ([B] bool) and their block starts."""

    @property
    def holds_full_blocks(self) -> bool:
        """Rows of a batch leave a block together: a row whose block is full waits until every active row's is
        (d2Cache's published batch loop, ``top_up``); the policy of blocks holds them."""

    def check(self) -> None:
        """Raise ValueError (one line naming the value and the allowed range) for a parameter out of range."""

    def check_combination(self, *, policy: Any, rule: Any, gen_length: int, block_length: int) -> None:
        """Raise ValueError where the published code never ran this cache with that policy, rule or length."""

    @classmethod
    def check_flavour(cls, flavour: str, policy_name: str) -> None:
        """Raise ValueError where the published code never ran this cache on that model flavour (one of ``flavours``)
        or with that policy on it."""

    def session(self, canvas: Canvas) -> CacheSession:
        """A fresh session for one decode."""


class CacheBase:
    """Defaults of the optional parts of the protocol; caches subclass it as frozen dataclasses."""

    name: ClassVar[str] = ""
    stateless: ClassVar[bool] = False
    shorter_canvas: ClassVar[bool] = False
    stores: ClassVar[tuple[str, ...]] = ("k", "v")
    flavours: ClassVar[tuple[str, ...]] = ("llada", "dream")
    # the model switches (load_model's attention, block_grid) a model must run with for it; {} = any model
    model_switches: ClassVar[dict[str, str]] = {}
    # host reads per decoding step at batch 1 it stays within (scripts/count_syncs.py, tests/decoding/test_sync_budget.py)
    sync_budget: ClassVar[int] = 3

    @property
    def force_first(self) -> bool:
        return False

    def adjust_commit(self, commit: torch.Tensor, candidates: torch.Tensor, refreshed: torch.Tensor,
                      block_lo: torch.Tensor) -> torch.Tensor:
        return commit

    @property
    def holds_full_blocks(self) -> bool:
        return False

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        return None

    def check_combination(self, *, policy: Any, rule: Any, gen_length: int, block_length: int) -> None:
        return None

    @classmethod
    def check_flavour(cls, flavour: str, policy_name: str) -> None:
        if flavour not in cls.flavours:
            raise ValueError(f"cache {cls.name!r} runs on {', '.join(cls.flavours)} models only, got a {flavour!r} "
                             "model")


@dataclass
class Cohort:
    """Rows that share one storage (what it holds was computed for all of them together), since their refresh."""

    rows: torch.Tensor  # [b] global row indices on the device
    host_rows: list[int]
    storage: Any
    block: tuple[int, int] = (0, 0)  # the block (answer coordinates) the storage was filled for
    since_refresh: int = 0  # forwards since the refresh, the refresh included
    forwards: int = 0

    def shrink(self, keep: list[bool], rows: StepRows) -> bool:
        """Keep the rows where ``keep`` holds (the storage too); False when none is left."""
        if not any(keep):
            return False
        if not all(keep):
            index = [i for i, k in enumerate(keep) if k]
            self.storage.keep_rows(torch.tensor(index, dtype=torch.long, device=self.rows.device))
            self.host_rows = [self.host_rows[i] for i in index]
            self.rows = rows.device(self.host_rows)
        return True


def ascending_positions(chosen: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A cached forward's per-row query positions: the ascending positions [b, width] where ``chosen`` [b, T] holds,
    a row with fewer repeating its last (it computes nothing more; a row with none: T - 1), which entries are a
    row's own ([b, width] bool), and the counts [b]."""
    T = chosen.shape[1]
    j = torch.arange(T, device=chosen.device)
    counts = chosen.sum(dim=1)
    ordered = torch.sort(torch.where(chosen, j, T + j), dim=1).values[:, :width]
    last = ordered.gather(1, (counts - 1).clamp(min=0).unsqueeze(1))
    own = torch.arange(width, device=chosen.device) < counts.unsqueeze(1)
    return torch.where(own, ordered, last).clamp(max=T - 1), own, counts


def limit_groups(rows: list[int], limits: list[int] | None, answer_length: int) -> list[tuple[list[int], int]]:
    """Rows grouped by the answer length the network sees (all of it without a canvas limit)."""
    if limits is None:
        return [(rows, answer_length)]
    return [([r for r in rows if limits[r] == lim], lim) for lim in sorted({limits[r] for r in rows})]


CACHES = Registry("cache")
register = CACHES.register  # class decorator: add a cache dataclass to ``CACHES`` under its name
cache_parameters = CACHES.parameters
cache_defaults = CACHES.defaults
build_cache = CACHES.build
