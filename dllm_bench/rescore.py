"""`dllm-bench-rescore <run or results folder> scoring=<paper|lm_eval> [workers=N]`: rescore stored completions.

Also `python -m dllm_bench.rescore ...`. Reads samples.jsonl and the task's data; never loads a model.
"""

from __future__ import annotations

import sys

from dllm_bench.runner.rescore import RescoreError, rescore
from dllm_bench.tasks.base import SCORING_MODES

USAGE = "usage: dllm-bench-rescore <run folder | results folder> scoring=<paper|lm_eval> [workers=N]"


def parse_args(argv: list[str]) -> tuple[str, str, int | None]:
    """(path, mode, workers) from `<path> scoring=<mode> [workers=N]`; SystemExit(2) with one line otherwise."""
    paths = [a for a in argv if "=" not in a]
    options = dict(a.split("=", 1) for a in argv if "=" in a)
    unknown = sorted(set(options) - {"scoring", "workers"})
    if unknown:
        _fail(f"{unknown[0]}={options[unknown[0]]!r} is not allowed: the options are scoring= and workers=")
    if len(paths) != 1:
        _fail(f"expected one run or results folder, got {len(paths)}")
    mode = options.get("scoring")
    if mode not in SCORING_MODES:
        _fail(f"scoring={mode!r} is not allowed: choose one of {', '.join(SCORING_MODES)}")
    workers = options.get("workers")
    if workers is not None and not (workers.isdigit() and int(workers) >= 1):
        _fail(f"workers={workers!r} is not allowed: an integer >= 1 is required")
    return paths[0], mode, None if workers is None else int(workers)


def _fail(message: str) -> None:
    print(f"dllm-bench-rescore: {message}\n{USAGE}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    path, mode, workers = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        rows = rescore(path, mode, workers)
    except RescoreError as err:
        print(f"dllm-bench-rescore: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if not rows:
        print(f"nothing to rescore under {path}: every run there is already scored as {mode}")
    for row in rows:
        print(f"{row['run_id']}: accuracy {row['accuracy']:.4f} n={row['n_samples']} (scoring={mode}, "
              f"rescored from {row['rescored_from']})")


if __name__ == "__main__":
    main()
