"""Where a run writes: `output_dir` and `name` checked before anything (Hydra's log folder included) is made."""

from __future__ import annotations

from typing import Any

from dllm_bench.runner.errors import ConfigError


def check_output_location(output_dir: Any, name: Any) -> None:
    """`output_dir` a non-empty path and `name` one folder name inside it, so nothing lands elsewhere (the
    repository, the filesystem root, a sibling of output_dir); checked before Hydra makes its log folder."""
    if not isinstance(output_dir, str) or not output_dir.strip():
        raise ConfigError(f"output_dir={output_dir!r} is not allowed: a directory path is required (relative "
                          "paths start from the current directory; the default is results)")
    if (not isinstance(name, str) or name.strip() in ("", ".", "..") or "/" in name or "\\" in name
            or name != name.strip()):
        raise ConfigError(f"name={name!r} is not allowed: "
                          "one folder name inside output_dir is required (no '/', not '.' or '..', not empty)")
