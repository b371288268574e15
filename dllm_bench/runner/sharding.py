"""Data-parallel sharding under torchrun / accelerate launch: rank r takes documents r, r+W, r+2W, ..."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch.distributed as dist

T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    """This process's place in a data-parallel run (world_size 1 = plain single process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def export_submitit_env() -> bool:
    """Inside a submitit SLURM job with several tasks (hydra.launcher.tasks_per_node > 1), set the torchrun
    variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) from SLURM's; True if it did."""
    if "WORLD_SIZE" in os.environ or os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return False
    if int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
        return False
    from submitit.helpers import TorchDistributedEnvironment

    TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return True


def init_distributed() -> DistContext:
    """Read RANK/WORLD_SIZE/LOCAL_RANK (set by torchrun, accelerate launch, or a multi-task submitit job)
    and join the gloo group.

    Only barriers cross processes (results travel through files), so gloo serves CPU and GPU runs alike.
    """
    export_submitit_env()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    ctx = DistContext(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=ctx.rank, world_size=world, timeout=timedelta(hours=12))
    return ctx


def barrier(ctx: DistContext) -> None:
    """Wait for every rank (no-op in a single process)."""
    if ctx.world_size > 1 and dist.is_initialized():
        dist.barrier()


def shutdown(ctx: DistContext) -> None:
    if ctx.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def shard(items: list[T], ctx: DistContext) -> list[T]:
    """This rank's strided share of `items` (every item lands on exactly one rank)."""
    return items[ctx.rank :: ctx.world_size]
