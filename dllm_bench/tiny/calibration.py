"""How well a tiny checkpoint's confidences match the exact posterior, on training states and on decoding states.

    python -m dllm_bench.tiny.calibration dllm_bench/tiny/checkpoints/tiny_llada --rule frechet

On 4x4 Sudoku the exact posterior of every cell is known (the valid grids agreeing with the clues and the
committed cells, equally likely), so a commit rule's failures can be traced to the model. Two views:

- training states: answers masked as in training (t ~ U(0, 1)); every masked cell's top digit, binned by the
  model's confidence, against its posterior probability (a reliability table);
- decoding states: the rule's own decode (one block, no cache); each committed cell's confidence against
  the posterior probability of the committed digit given the state before the step, and the step at which
  each failing puzzle first became impossible to complete.

Cells a rule commits are the most confident ones, so noise in the model's estimates shows up there as
overconfidence even when the model is calibrated on average.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from dllm_bench.decoding.commit_masks import factor_commit_mask, frechet_commit_mask, threshold_commit_mask
from dllm_bench.models import load_model
from dllm_bench.tasks.sudoku_puzzles import (
    CELLS,
    agreeing_grids,
    completion_marginals,
    load_test_set,
    parse_puzzle,
    puzzle_stream,
)
from dllm_bench.tiny.encoding import DEFAULT_GEN_LENGTH, cell_digits, encode_batch, posterior_answer_targets
from dllm_bench.tiny.objective import mask_answers

BINS = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0 + 1e-9)
RULES = {"frechet": frechet_commit_mask, "factor": factor_commit_mask, "threshold": threshold_commit_mask}
DEFAULT_VALUE = {"frechet": 0.25, "factor": 1.0, "threshold": 0.9}


def reliability(conf: np.ndarray, true: np.ndarray) -> list[dict]:
    """Rows of a reliability table: per confidence bin, count, mean confidence, mean posterior probability."""
    rows = []
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        sel = (conf >= lo) & (conf < hi)
        if sel.any():
            rows.append({"bin": f"[{lo:.2f}, {min(hi, 1.0):.2f}]", "n": int(sel.sum()),
                         "confidence": float(conf[sel].mean()), "posterior": float(true[sel].mean())})
    return rows


@torch.no_grad()
def training_state_reliability(model, n: int, seed: int = 123) -> list[dict]:
    """Reliability of masked cells' top digits on `n` held-out open puzzles masked as in training."""
    tok, cfg = model.tokenizer, model.config
    stream = puzzle_stream(seed, "test", "open")
    batch = [next(stream) for _ in range(n)]
    prompts, answers = encode_batch(tok, cfg, [b[0] for b in batch], [b[1] for b in batch], DEFAULT_GEN_LENGTH)
    noisy, masked, _ = mask_answers(answers, cfg.mask_token_id, 1e-3, torch.Generator().manual_seed(seed))
    p_len = prompts.shape[1]
    probs = model(torch.cat([prompts, noisy], 1), logits_range=(p_len, p_len + DEFAULT_GEN_LENGTH)).double().softmax(-1)
    targets = posterior_answer_targets(tok, [b[0] for b in batch], answers, masked, cfg.vocab_size).double()
    conf, pred = probs.max(-1)
    true = targets.gather(-1, pred[..., None])[..., 0]
    cells = masked.clone()
    cells[:, CELLS:] = False
    return reliability(conf[cells].numpy(), true[cells].numpy())


@torch.no_grad()
def decoding_state_reliability(model, rows: list[dict], rule: str, value: float) -> dict:
    """Decode `rows` with one commit rule in one block; committed cells' confidence vs posterior, failures."""
    tok, cfg = model.tokenizer, model.config
    gen = DEFAULT_GEN_LENGTH
    prompts, _ = encode_batch(tok, cfg, [r["puzzle"] for r in rows], [r["solution"] for r in rows], gen)
    p_len, n = prompts.shape[1], len(rows)
    canvas = torch.cat([prompts, torch.full((n, gen), cfg.mask_token_id)], 1)
    known = np.stack([parse_puzzle(r["puzzle"]) for r in rows]).astype(np.int64)
    alive = np.ones(n, dtype=bool)  # still completable to a valid grid
    failed_at: dict[int, int] = {}
    conf_list, true_list = [], []
    for step in range(gen):
        masked = canvas[:, p_len:] == cfg.mask_token_id
        if not masked.any():
            break
        probs = model(canvas, logits_range=(p_len, p_len + gen)).double().softmax(-1)
        conf, pred = probs.max(-1)
        commit = RULES[rule](conf, masked, value)
        marg = completion_marginals(np.where(alive[:, None], known, 0))  # dead rows: placeholder, unused
        pred_digits = cell_digits(tok, pred[:, :CELLS])
        for b, pos in commit[:, :CELLS].nonzero().tolist():
            digit = int(pred_digits[b, pos])
            if alive[b]:
                conf_list.append(float(conf[b, pos]))
                true_list.append(float(marg[b, pos, digit - 1]) if digit else 0.0)
            known[b, pos] = digit
        canvas[:, p_len:] = torch.where(commit, pred, canvas[:, p_len:])
        stranded = alive & ~agreeing_grids(known).any(axis=1)
        failed_at.update({int(b): step for b in np.flatnonzero(stranded)})
        alive &= ~stranded
    steps = np.bincount(list(failed_at.values()), minlength=1).tolist() if failed_at else []
    return {"rule": rule, "value": value, "puzzles": n, "failed": len(failed_at),
            "failed_at_step": {s: c for s, c in enumerate(steps) if c},
            "committed": reliability(np.array(conf_list), np.array(true_list))}


def _table(rows: list[dict]) -> str:
    lines = ["| confidence bin | cells | mean confidence | mean posterior |", "|---|---:|---:|---:|"]
    lines += [f"| {r['bin']} | {r['n']} | {r['confidence']:.3f} | {r['posterior']:.3f} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--rule", choices=sorted(RULES), default="frechet")
    ap.add_argument("--value", type=float, default=None, help="delta / f / tau (default: 0.25 / 1.0 / 0.9)")
    ap.add_argument("--limit", type=int, default=200, help="held-out puzzles to decode (default 200)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_model(args.checkpoint, device="cpu", dtype="float32")
    value = DEFAULT_VALUE[args.rule] if args.value is None else args.value
    train_rows = training_state_reliability(model, 512)
    decode = decoding_state_reliability(model, load_test_set()[:args.limit], args.rule, value)
    if args.json:
        print(json.dumps({"training_states": train_rows, "decoding": decode}, indent=1))
        return
    print("training states (masked as in training, 512 held-out puzzles):\n" + _table(train_rows))
    print(f"\ncells committed by {args.rule} {value} ({decode['failed']} of {decode['puzzles']} puzzles "
          f"became impossible; at step: {decode['failed_at_step']}):\n" + _table(decode["committed"]))


if __name__ == "__main__":
    main()
