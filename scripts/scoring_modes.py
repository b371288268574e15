"""Gold answers and canonical answer styles under both scoring modes (the docs/tasks.md "Scoring modes" tables).

    python scripts/scoring_modes.py                         # ../shared/data beside the checkout, 4 workers
    python scripts/scoring_modes.py --data ../shared/data --workers 8 --only humaneval

No model: every completion is built from the reference solutions; programs run in the sandbox. For the code
tasks the last columns give lm-eval's own pipeline (the same in 0.4.8 and 0.4.13: the raw completion, HumanEval
as prompt + completion cut at its stop strings, executed with code_eval's semantics) and on how many rows
`lm_eval` mode's verdict differs from it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dllm_bench.tasks import get_task  # noqa: E402
from dllm_bench.tasks.code_eval_semantics import code_eval_program  # noqa: E402
from dllm_bench.tasks.code_extract import cut_at_stops  # noqa: E402
from dllm_bench.tasks.sandbox import execute_many  # noqa: E402

MODES = ("paper", "lm_eval")


def def_line(prompt: str, entry: str) -> str:
    """The entry point's signature as the prompt writes it (one or more lines, up to the colon)."""
    lines = prompt.splitlines()
    i = next(k for k, line in enumerate(lines) if re.match(rf"\s*def\s+{re.escape(entry)}\s*\(", line))
    j = i
    while not lines[j].rstrip().endswith(":"):
        j += 1
    return "\n".join(lines[i : j + 1])


def _signature_and_body(d: dict) -> str:
    return f"{def_line(d['prompt'], d['entry_point'])}\n{d['canonical_solution']}"


HUMANEVAL_STYLES: dict[str, Callable[[dict], str]] = {
    "gold: canonical body as a continuation": lambda d: d["canonical_solution"],
    "prompt + body, python fence": lambda d: f"```python\n{d['prompt']}{d['canonical_solution']}```",
    "def line + body, python fence": lambda d: f"```python\n{_signature_and_body(d)}```",
    "prose + python fence (def line + body)": lambda d: f"Here it is:\n```python\n{_signature_and_body(d)}```\nDone.",
    "def line + body, no fence": _signature_and_body,
    "prompt + body, untagged fence": lambda d: f"```\n{d['prompt']}{d['canonical_solution']}```",
}
MBPP_STYLES: dict[str, Callable[[dict], str]] = {
    "gold: raw canonical code": lambda d: d["code"],
    "python fence": lambda d: f"```python\n{d['code']}\n```",
    "prose + python fence": lambda d: f"Here you go:\n```python\n{d['code']}\n```\n",
    "[BEGIN] + code": lambda d: f"[BEGIN]\n{d['code']}",
}


def verdicts(task_name: str, mode: str, make: Callable[[dict], str], workers: int, **cfg) -> list[bool]:
    """Per-row verdicts for the completions `make(doc)` under `mode`."""
    task = get_task(task_name, scoring=mode, **cfg)
    docs = task.docs()
    return [s.correct for s in task.score_many([make(d) for d in docs], docs, workers=workers)]


def lm_eval_itself(task_name: str, make: Callable[[dict], str], workers: int, **cfg) -> list[bool]:
    """Per-row verdicts of lm-eval's own mbpp / humaneval (identical in 0.4.8 and 0.4.13)."""
    if task_name == "mbpp":  # scoring=paper is lm-eval's mbpp: raw completion + the three asserts, code_eval
        return verdicts("mbpp", "paper", make, workers, **cfg)
    task = get_task("humaneval", scoring="paper", **cfg)
    docs = task.docs()
    programs = [code_eval_program(f"{d['prompt']}{cut_at_stops(make(d), task.stop_strings)}\n{d['test']}\n"
                                  f"check({d['entry_point']})", task.wall_timeout_s) for d in docs]
    limits, wall = task.run_spec()
    return [r.passed for r in execute_many(programs, task.timeout_s, workers, limits, wall_timeout_s=wall)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"), help="benchmark data folder")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--only", choices=("gsm8k", "math", "humaneval", "mbpp"), action="append")
    args = parser.parse_args(argv)
    data = Path(args.data)
    if not data.is_dir():
        parser.error(f"--data {str(data)!r} is not a folder; give the benchmark data folder (../shared/data)")
    jobs: list[tuple[str, str, str, Callable[[dict], str], dict]] = []
    if not args.only or "gsm8k" in args.only:
        jobs.append(("gsm8k", "gold: reference answers", "gsm8k", lambda d: d["answer"],
                     {"data_dir": str(data / "gsm8k")}))
    if not args.only or "math" in args.only:
        for label, name, file in (("MATH", "minerva_math", "math_test_full5000.jsonl"),
                                  ("MATH-500", "minerva_math500", "math500_test.jsonl")):
            jobs.append((label, "gold: reference solutions", name, lambda d: d["solution"],
                         {"data_files": str(data / "math" / file)}))
    if not args.only or "humaneval" in args.only:
        jobs += [("HumanEval", s, "humaneval", f, {"timeout_s": 30}) for s, f in HUMANEVAL_STYLES.items()]
    if not args.only or "mbpp" in args.only:
        jobs += [("MBPP", s, "mbpp", f, {"data_files": str(data / "mbpp" / "mbpp.jsonl"), "timeout_s": 30})
                 for s, f in MBPP_STYLES.items()]
    print("| task | completions | paper | lm_eval | lm-eval itself | lm_eval mode differs on |\n|---|---|---|---|---|---|")
    for label, style, name, make, cfg in jobs:
        result = {mode: verdicts(name, mode, make, args.workers, **cfg) for mode in MODES}
        cells = [f"{sum(result[m])} / {len(result[m])}" for m in MODES]
        if name in ("humaneval", "mbpp"):
            itself = lm_eval_itself(name, make, args.workers, **cfg)
            cells += [f"{sum(itself)} / {len(itself)}", str(sum(a != b for a, b in zip(itself, result["lm_eval"])))]
        else:
            cells += ["= lm_eval", "0"]
        print(f"| {label} | {style} | {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
