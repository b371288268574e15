"""Benchmark registry: `get_task(name, **cfg)` builds a Task; importing this package registers every task module.

Adding a task: a module here with a ``@register``-ed ``Task`` subclass (its ``name``), and ``conf/task/<name>.yaml``
holding its settings (docs/tasks.md).
"""

from __future__ import annotations

from typing import Any

from dllm_bench.decoding.params import import_submodules
from dllm_bench.tasks.base import TASKS, Score, Task, TaskConfig, register
from dllm_bench.tasks.chat import render_prompt

import_submodules(__name__, __path__)


def get_task(name: str, **cfg: Any) -> Task:
    """Build the task called `name` with config `cfg` (limit, offset, num_fewshot, data_files, rank, ...)."""
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; choose one of: {', '.join(sorted(TASKS))}")
    return TASKS[name](**cfg)


__all__ = ["TASKS", "Score", "Task", "TaskConfig", "get_task", "register", "render_prompt"]
