"""Runner test helpers: compose the real Hydra config with overrides, on random tiny checkpoints."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from dllm_bench.run import main
from dllm_bench.runner.config import CONF_DIR, register_resolvers
from dllm_bench.runner.execute import execute

register_resolvers()


def compose_config(*overrides: str) -> DictConfig:
    """The app's config as `dllm-bench <overrides>` would see it."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=False)


@pytest.fixture()
def compose_cfg():
    """`compose(*overrides)` -> the composed DictConfig."""
    return compose_config


@pytest.fixture()
def llada_overrides(tiny_llada_dir: Path, tmp_path: Path) -> list[str]:
    """Overrides for a random tiny LLaDA on sudoku, results under tmp_path."""
    return [f"model.name_or_path={tiny_llada_dir}", f"output_dir={tmp_path / 'results'}", "progress=false",
            "num_threads=1"]


@pytest.fixture()
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Callable[..., tuple[int, list[str]]]:
    """`run_cli(*argv)`: `dllm-bench <argv>` through the console script's entry point -> (exit status, stderr
    lines)."""

    def run(*argv: str) -> tuple[int, list[str]]:
        monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
        monkeypatch.delenv("DLLM_BENCH_TRACEBACK", raising=False)
        monkeypatch.setattr(sys, "argv", ["dllm-bench", *argv])
        capsys.readouterr()
        try:
            with pytest.raises(SystemExit) as exit_info:
                main()
        finally:
            GlobalHydra.instance().clear()
        return exit_info.value.code, capsys.readouterr().err.strip().splitlines()

    return run


def _rank_main(cfg: DictConfig, rank: int, port: int) -> None:
    """What torchrun / accelerate launch set up for each process, then the ordinary run."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    execute(cfg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def two_ranks() -> Callable[[DictConfig], None]:
    """`two_ranks(cfg)`: run `cfg` as two forked gloo processes (ranks 0 and 1); both must exit 0."""

    def run(cfg: DictConfig) -> None:
        port = _free_port()
        ctx = mp.get_context("fork")
        procs = [ctx.Process(target=_rank_main, args=(cfg, rank, port)) for rank in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=300)
        assert [p.exitcode for p in procs] == [0, 0]

    return run
