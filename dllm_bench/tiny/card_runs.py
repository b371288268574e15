"""What the tiny checkpoints' evaluated cards share: one ``python -m dllm_bench.run`` per setting into a scratch
folder, its summary as a card row, and the command line that evaluates and renders a card."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

CHECKPOINTS = Path(__file__).parent / "checkpoints"


def run_settings(settings: Iterable[tuple[dict, list[str]]]) -> list[dict]:
    """Run each (fields, CLI arguments) setting, one at a time; each row is the fields, the exact command, the run's
    accuracy with its interval, NFE, forward positions and tokens per forward, and its wall and CPU seconds."""
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for fields, args in settings:
            cmd = [sys.executable, "-m", "dllm_bench.run", *args, f"output_dir={out}", "progress=false"]
            t0, c0 = time.time(), os.times()
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            c1 = os.times()
            path = next(Path(out).rglob("run.json"))
            run = json.loads(path.read_text())
            path.unlink()  # one run per setting: clear it for the next
            s = run["summary"]
            rows.append({"command": "python -m dllm_bench.run " + " ".join(args), **fields,
                         "puzzles": s["n_samples"], "accuracy": s["accuracy"],
                         "ci": [s["accuracy_ci_low"], s["accuracy_ci_high"]], "nfe_mean": s["nfe_mean"],
                         "forward_positions_mean": s["forward_positions_total"] / s["n_samples"],
                         "tokens_per_forward": s["tokens_per_forward"], "wall_s": round(time.time() - t0, 1),
                         "cpu_s": round(c1.children_user + c1.children_system - c0.children_user - c0.children_system, 1),
                         "device": run["device_name"], "date_utc": run["finished_at"]})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def card_main(description: str, which: str, choices: Iterable[str], evaluate: Callable[[str, int], Path],
              render: Callable[[str], str], directory: Callable[[str], Path], argv: list[str] | None = None) -> None:
    """``<which> [--limit N] [--card-only]``: evaluate (unless card-only), then write the card into ``directory``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument(which, choices=sorted(choices))
    ap.add_argument("--limit", type=int, default=100, help="held-out puzzles per setting (default 100)")
    ap.add_argument("--card-only", action="store_true", help="render the card from the recorded results")
    args = ap.parse_args(argv)
    name = getattr(args, which)
    if not args.card_only:
        print(f"wrote {evaluate(name, args.limit)}")
    path = directory(name) / "MODEL_CARD.md"
    path.write_text(render(name))
    print(f"wrote {path}")
