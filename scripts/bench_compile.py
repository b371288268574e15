"""Step time of the eager network against its compiled layer stack (``model.compile``, models/compiled.py).

For each model, cache and batch: an eager decode (warmed up), then the same decode with the stack compiled by
inductor, run once untimed to compile every shape it meets (``compile_warmup_s``: the seconds of the calls that
compiled), then timed; each timed decode is the best of ``--repeats`` (the uncontended cost on a shared machine).
The tokens and NFE of the two must be identical (``tokens_equal``, ``nfe_equal``; the script exits 1 otherwise),
and the timed compiled decodes must compile nothing (``compiles_in_timed``). Models: the shipped tiny LLaDA and Dream
checkpoints on Sudoku puzzles (gen 24, block 8, threshold 0.9) and bench.py's cpu-mid random network (prompt 256,
answer ``--mid-answer`` (128), block 32, 4 top-k steps a block); writes results/bench/compiled_steps_<device>.csv,
where the rows measured replace those of the same model, cache and batch and the others stay (``--fresh``: only the
rows of this run), so each model and batch can be measured by its own command.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, build_cache, build_policy, build_rule, generate
from dllm_bench.models import load_model
from dllm_bench.models.compiled import COMPILE_MODES, compile_network
from dllm_bench.tasks.sudoku import SudokuTask
from dllm_bench.tiny.encoding import DEFAULT_GEN_LENGTH, encode_batch

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("tiny_llada", "tiny_dream", "cpu-mid")


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_script", ROOT / "scripts" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(name: str, device: torch.device, answer: int = 128):
    """The network, and a function of (batch, cache name) -> (ids, Decoding); ``answer``: cpu-mid's answer length."""
    if name == "cpu-mid":
        bench = _bench_module()
        model = bench.build_model("cpu-mid", device, torch.float32)
        prompt, block = 256, 32

        def setting(batch: int, cache: str):
            ids = torch.randint(0, model.config.vocab_size - 8, (batch, prompt),
                                generator=torch.Generator().manual_seed(1)).to(device)
            return ids, Decoding(answer, block, build_policy("blocks", steps=answer // block * 4),
                                 build_rule("topk"), build_cache(cache))
        return model, setting
    model = load_model(ROOT / "dllm_bench" / "tiny" / "checkpoints" / name, device=device, dtype="float32")

    def setting(batch: int, cache: str):
        rows = SudokuTask(limit=batch).docs()
        ids, _ = encode_batch(model.tokenizer, model.config, [r["puzzle"] for r in rows],
                              [r["solution"] for r in rows], DEFAULT_GEN_LENGTH)
        return ids.to(device), Decoding(DEFAULT_GEN_LENGTH, 8, build_policy("blocks"),
                                        build_rule("threshold", threshold=0.9), build_cache(cache),
                                        early_stop=True)
    return model, setting


def ids_answer(name: str, args: argparse.Namespace) -> int:
    """The decode's answer length: cpu-mid's ``--mid-answer``, the tiny task's gen length."""
    return args.mid_answer if name == "cpu-mid" else DEFAULT_GEN_LENGTH


def decode(model, ids: torch.Tensor, decoding: Decoding) -> tuple[float, list[list[int]], list[int]]:
    """(seconds, tokens, NFE per row) of one decode."""
    if ids.device.type == "cuda":
        torch.cuda.synchronize(ids.device)
    start = time.perf_counter()
    with torch.no_grad():
        out = generate(model, ids, torch.ones_like(ids), DecodeSpec(decoding))
    if ids.device.type == "cuda":
        torch.cuda.synchronize(ids.device)
    return time.perf_counter() - start, out.tokens.tolist(), [r.nfe for r in out.records]


def best_of(model, ids, make, repeats: int) -> tuple[float, list[list[int]], list[int]]:
    runs = [decode(model, ids, make()) for _ in range(repeats)]
    return min(r[0] for r in runs), runs[0][1], runs[0][2]


KEY = ["model", "cache", "batch"]


def write(rows: list[dict], args: argparse.Namespace, device: torch.device, out: Path,
          kept: pd.DataFrame | None) -> pd.DataFrame:
    """This run's rows, after the ``kept`` rows of other (model, cache, batch) keys; the frame written."""
    frame = pd.DataFrame(rows)
    frame["mode"], frame["threads"], frame["torch"] = args.mode, args.threads, torch.__version__
    frame["device"] = (torch.cuda.get_device_name(device) if device.type == "cuda"
                       else platform.processor() or "cpu")
    if kept is not None and len(kept):
        measured = pd.MultiIndex.from_frame(frame[KEY])
        kept = kept[~pd.MultiIndex.from_frame(kept[KEY]).isin(measured)]
        frame = pd.concat([kept, frame], ignore_index=True)
    frame.to_csv(out / f"compiled_steps_{device.type}.csv", index=False)
    return frame


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--caches", nargs="+", default=["none", "dual"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--mode", default="default", choices=COMPILE_MODES)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mid-answer", type=int, default=128, help="cpu-mid's answer length (a multiple of 32)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--fresh", action="store_true", help="write only this run's rows (default: replace them in the CSV)")
    args = ap.parse_args()
    if args.mid_answer < 32 or args.mid_answer % 32 or args.repeats < 1 or args.threads < 1 or min(args.batches) < 1:
        print(f"bench_compile: --mid-answer must be a positive multiple of 32 (got {args.mid_answer}), --repeats, "
              f"--threads and --batches >= 1 (got {args.repeats}, {args.threads}, {args.batches})", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    existing = out / f"compiled_steps_{device.type}.csv"
    kept = pd.read_csv(existing) if existing.exists() and not args.fresh else None
    rows, frame = [], pd.DataFrame()
    for name in args.models:
        model, setting = build(name, device, args.mid_answer)
        eager_stack = model.layer_stack
        compiled = compile_network(model, args.mode).layer_stack
        for batch in args.batches:
            for cache in args.caches:
                ids, _ = setting(batch, cache)

                def make(batch=batch, cache=cache, setting=setting):
                    return setting(batch, cache)[1]
                load = os.getloadavg()[0]
                model.layer_stack = eager_stack
                decode(model, ids, make())  # warm-up
                eager_s, eager_tokens, eager_nfe = best_of(model, ids, make, args.repeats)
                model.layer_stack = compiled
                before_s, before_n = compiled.compile_s, compiled.compiles
                decode(model, ids, make())  # compiles every shape of this decode
                warm_s, warm_n = compiled.compile_s - before_s, compiled.compiles - before_n
                comp_s, comp_tokens, comp_nfe = best_of(model, ids, make, args.repeats)
                steps = max(eager_nfe)
                row = dict(model=name, cache=cache, batch=batch, answer=ids_answer(name, args), steps=steps,
                           eager_step_ms=round(eager_s / steps * 1e3, 3),
                           compiled_step_ms=round(comp_s / steps * 1e3, 3),
                           speedup=round(eager_s / comp_s, 3), compile_warmup_s=round(warm_s, 2),
                           graphs_compiled=warm_n, compiles_in_timed=compiled.compiles - before_n - warm_n,
                           tokens_equal=comp_tokens == eager_tokens, nfe_equal=comp_nfe == eager_nfe,
                           load_average_1m=round(load, 2), load_average_1m_end=round(os.getloadavg()[0], 2))
                rows.append(row)
                print(row, flush=True)
                frame = write(rows, args, device, out, kept)  # after every row: a stopped run keeps what it measured
    print(frame.to_string(index=False))
    if not all(r["tokens_equal"] and r["nfe_equal"] for r in rows):
        print("bench_compile: the compiled decode's tokens or NFE differ from eager's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
