"""PC-Sampler's reference corpus for the tiny checkpoints, counted from the shipped Sudoku data.

The ``pc_sampler`` rule reads the tables this writes (``dllm_bench/tiny/pc_sampler/<checkpoint>.json``, in
PC-Sampler's ``{"num_token": N, "p_baseline_dict": {id: count}}`` format): token counts, with the checkpoint's
tokenizer, of the chat-templated puzzles and their answers (16 digits, end-of-turn, EOS to the default 24 tokens)
of ``dllm_bench/tasks/sudoku_data/sudoku_test.jsonl``. ``python -m dllm_bench.tiny.reference_corpus`` rewrites them;
tests/decoding/test_rules_klass_pc.py checks that the shipped files equal a fresh count.
"""

from __future__ import annotations

import json
from pathlib import Path

from dllm_bench.models import load_tokenizer
from dllm_bench.tasks.sudoku_puzzles import load_test_set
from dllm_bench.tiny.encoding import DEFAULT_GEN_LENGTH, answer_ids, prompt_ids

TINY_DIR = Path(__file__).resolve().parent
TABLE_DIR = TINY_DIR / "pc_sampler"
CHECKPOINTS = ("tiny_llada", "tiny_dream")


def count(checkpoint: str) -> dict:
    """The checkpoint's reference corpus in PC-Sampler's format."""
    directory = TINY_DIR / "checkpoints" / checkpoint
    config = json.loads((directory / "config.json").read_text())
    tokenizer = load_tokenizer(directory)
    counts: dict[str, int] = {}
    total = 0
    for row in load_test_set():
        ids = prompt_ids(tokenizer, row["puzzle"]) + answer_ids(
            tokenizer, row["solution"], DEFAULT_GEN_LENGTH, config["eos_token_id"], config.get("eot_token_id"))
        for i in ids:
            counts[str(i)] = counts.get(str(i), 0) + 1
        total += len(ids)
    return {"num_token": total, "p_baseline_dict": counts}


def main() -> None:
    TABLE_DIR.mkdir(exist_ok=True)
    for checkpoint in CHECKPOINTS:
        path = TABLE_DIR / f"{checkpoint}.json"
        path.write_text(json.dumps(count(checkpoint), sort_keys=True) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
