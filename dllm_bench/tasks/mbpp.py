"""MBPP test split (task_id 11-510) with lm-eval's 3-shot `[BEGIN] ... [DONE]` prompt; pass@1 by execution."""

from __future__ import annotations

from dllm_bench.tasks.base import register
from dllm_bench.tasks.code_extract import cut_at_stops, fenced_blocks
from dllm_bench.tasks.data import INTEGER, STRING, TEXT, assert_list, load_rows
from dllm_bench.tasks.executed import ExecutedTask

FIELDS = ("task_id", "text", "code", "test_list")
# the asserts are the verdict (the prompt shows the first three): an empty or `pass` one passes any program
ROW_SCHEMA = {"task_id": INTEGER, "text": TEXT, "code": STRING, "test_list": assert_list(3)}
TEST_IDS = range(11, 511)

# lm-eval mbpp utils.list_fewshot_samples: MBPP prompt split rows 2, 3, 4.
FEWSHOT = (
    ("Write a function to find the similar elements from the given two tuple lists.",
     "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & set(test_tup2))\r\n  return (res) ",
     ("assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
      "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)",
      "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)")),
    ("Write a python function to identify non-prime numbers.",
     "import math\r\ndef is_not_prime(n):\r\n    result = False\r\n    for i in range(2,int(math.sqrt(n)) + 1):\r\n"
     "        if n % i == 0:\r\n            result = True\r\n    return result",
     ("assert is_not_prime(2) == False", "assert is_not_prime(10) == True", "assert is_not_prime(35) == True")),
    ("Write a function to find the largest integers from a given list of numbers using heap queue algorithm.",
     "import heapq as hq\r\ndef heap_queue_largest(nums,n):\r\n  largest_nums = hq.nlargest(n, nums)\r\n  return largest_nums",
     ("assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],3)==[85, 75, 65] ",
      "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],2)==[85, 75] ",
      "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],5)==[85, 75, 65, 58, 35]")),
)


def render_question(text: str, tests: list[str] | tuple[str, ...]) -> str:
    """lm-eval mbpp doc_to_text (the first three asserts are shown)."""
    return (f"You are an expert Python programmer, and here is your task: {text} Your code should pass these tests:"
            f"\n\n{tests[0]}\n{tests[1]}\n{tests[2]}\n[BEGIN]\n")


@register
class MBPP(ExecutedTask):
    """lm-eval `mbpp`: 3 fixed shots, stop at '[DONE]', pass@1 = the row's asserts run to the end.

    scoring=paper: lm-eval's raw pass@1 as the papers scored it: the completion as generated (cut at the
    stop string only, no fence extraction) followed by the three asserts, without `test_setup_code`.
    """

    name = "mbpp"
    gold_key = "code"
    default_num_fewshot = 3
    stop_strings = ("[DONE]",)

    def __init__(self, **cfg) -> None:
        super().__init__(**cfg)
        if self.num_fewshot > len(FEWSHOT):
            raise ValueError(f"num_fewshot={self.num_fewshot}: mbpp has {len(FEWSHOT)} fixed shots")

    def load_all_docs(self) -> list[dict]:
        rows, _ = load_rows(
            data_files=self.config.data_files, data_dir=self.config.data_dir, default_names=("mbpp.jsonl",),
            hub_path="google-research-datasets/mbpp", hub_name="full", hub_split="test", required=ROW_SCHEMA,
        )
        docs = []
        for r in rows:
            if int(r["task_id"]) not in TEST_IDS:
                continue  # the full file also holds the prompt/validation/train splits
            docs.append({
                "sample_id": f"mbpp/{r['task_id']}", "doc_index": len(docs), "task_id": int(r["task_id"]),
                "text": r["text"], "code": r["code"], "test_list": list(r["test_list"]),
                "test_setup_code": r.get("test_setup_code") or "",
            })
        return docs

    def prompt(self, doc: dict, chat: bool = False) -> str:
        shots = "".join(f"{render_question(t, tests)}{code}\n[DONE]\n\n" for t, code, tests in FEWSHOT[: self.num_fewshot])
        return shots + render_question(doc["text"], doc["test_list"])

    def extract(self, completion: str, doc: dict) -> str:
        """The code: cut at '[DONE]', then (lm_eval) the first fenced block if the model used one."""
        text = cut_at_stops(completion, self.stop_strings)
        if self.scoring == "paper":
            return text
        blocks = fenced_blocks(text)
        code = blocks[0] if blocks else text
        return code.replace("[BEGIN]", "")

    def test_setup(self, doc: dict) -> str:
        """lm_eval mode runs the row's test_setup_code (it builds objects of the candidate's classes: mbpp/367)."""
        return "" if self.scoring == "paper" else doc["test_setup_code"]

    def tests(self, doc: dict) -> str:
        """The row's setup code (lm_eval only) and its asserts (paper: the first three)."""
        if self.scoring == "paper":
            return "\n".join(doc["test_list"][:3])
        return "\n".join([doc["test_setup_code"], *doc["test_list"]]) + "\n"
