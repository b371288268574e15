"""Benchmark registry: `get_task(name, **cfg)` builds a Task; modules are imported only when asked for."""

from __future__ import annotations

import importlib
from typing import Any

from dllm_bench.tasks.base import Score, Task, TaskConfig
from dllm_bench.tasks.chat import render_prompt

# name -> (module, class, fixed keyword arguments)
_REGISTRY: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gsm8k": ("dllm_bench.tasks.gsm8k", "GSM8K", {}),
    "gsm8k_cot": ("dllm_bench.tasks.gsm8k", "GSM8KCoT", {}),
    "minerva_math": ("dllm_bench.tasks.minerva_math", "MinervaMath", {}),
    "minerva_math500": ("dllm_bench.tasks.minerva_math", "MinervaMath500", {}),
    "humaneval": ("dllm_bench.tasks.humaneval", "HumanEval", {}),
    "mbpp": ("dllm_bench.tasks.mbpp", "MBPP", {}),
    "gpqa_main": ("dllm_bench.tasks.gpqa", "GPQA", {"subset": "gpqa_main"}),
    "gpqa_diamond": ("dllm_bench.tasks.gpqa", "GPQA", {"subset": "gpqa_diamond"}),
    "mathvista": ("dllm_bench.tasks.mathvista", "MathVista", {}),
    "mathverse": ("dllm_bench.tasks.mathverse", "MathVerse", {}),
    "sudoku": ("dllm_bench.tasks.sudoku", "SudokuTask", {}),
}

TASKS: tuple[str, ...] = tuple(_REGISTRY)


def get_task(name: str, **cfg: Any) -> Task:
    """Build the task called `name` with config `cfg` (limit, offset, num_fewshot, data_files, rank, ...)."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    module, cls_name, fixed = _REGISTRY[name]
    cls = getattr(importlib.import_module(module), cls_name)
    return cls(**fixed, **cfg)


__all__ = ["TASKS", "Score", "Task", "TaskConfig", "get_task", "render_prompt"]
