"""GSM8K as lm-eval's `gsm8k` (5-shot, random shots from train) and `gsm8k_cot` (8 fixed CoT shots)."""

from __future__ import annotations

import re
from pathlib import Path

from dllm_bench.tasks.base import Score, Task, register
from dllm_bench.tasks.data import TEXT, load_rows
from dllm_bench.tasks.fewshot import SeededFewshotSampler

# lm-eval gsm8k.yaml: metric exact_match with these ignore rules, applied in order to both sides.
IGNORE_REGEXES = (",", r"\$", r"(?s).*#### ", r"\.$")
FLEXIBLE_REGEX = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
STRICT_REGEX = re.compile(r"#### (\-?[0-9\.\,]+)")
COT_STRICT_REGEX = re.compile(r"The answer is (\-?[0-9\.\,]+).")
FALLBACK = "[invalid]"
ROW_SCHEMA = {"question": TEXT, "answer": TEXT}  # the test and train splits' rows
FILTERS = ("flexible-extract", "strict-match")

# lm-eval gsm8k-cot.yaml: the 8 chain-of-thought exemplars of Wei et al. (2022), in order.
COT_EXEMPLARS = (
    ("There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are done, "
     "there will be 21 trees. How many trees did the grove workers plant today?",
     "There are 15 trees originally. Then there were 21 trees after some more were planted. So there must have "
     "been 21 - 15 = 6. The answer is 6."),
    ("If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?",
     "There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. The answer is 5."),
    ("Leah had 32 chocolates and her sister had 42. If they ate 35, how many pieces do they have left in total?",
     "Originally, Leah had 32 chocolates. Her sister had 42. So in total they had 32 + 42 = 74. After eating 35, "
     "they had 74 - 35 = 39. The answer is 39."),
    ("Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 lollipops. How many lollipops did "
     "Jason give to Denny?",
     "Jason started with 20 lollipops. Then he had 12 after giving some to Denny. So he gave Denny 20 - 12 = 8. "
     "The answer is 8."),
    ("Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have now?",
     "Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. 5 + 4 = 9. "
     "The answer is 9."),
    ("There were nine computers in the server room. Five more computers were installed each day, from monday to "
     "thursday. How many computers are now in the server room?",
     "There were originally 9 computers. For each of 4 days, 5 more computers were added. So 5 * 4 = 20 "
     "computers were added. 9 + 20 is 29. The answer is 29."),
    ("Michael had 58 golf balls. On tuesday, he lost 23 golf balls. On wednesday, he lost 2 more. How many golf "
     "balls did he have at the end of wednesday?",
     "Michael started with 58 golf balls. After losing 23 on tuesday, he had 58 - 23 = 35. After losing 2 more, "
     "he had 35 - 2 = 33 golf balls. The answer is 33."),
    ("Olivia has $23. She bought five bagels for $3 each. How much money does she have left?",
     "Olivia had 23 dollars. 5 bagels for 3 dollars each will be 5 x 3 = 15 dollars. So she has 23 - 15 dollars "
     "left. 23 - 15 is 8. The answer is 8."),
)


def regex_filter(text: str, pattern: re.Pattern, group_select: int = 0) -> str:
    """lm-eval's `regex` filter: the `group_select`-th match (first non-empty group), stripped, or '[invalid]'."""
    matches = pattern.findall(text)
    if not matches:
        return FALLBACK
    match = matches[group_select]
    if isinstance(match, tuple):
        groups = [m for m in match if m]
        match = groups[0] if groups else FALLBACK
    return match.strip()


def normalize_for_match(text: str) -> str:
    """lm-eval's exact_match preprocessing for gsm8k: drop the ignore regexes, then lower-case."""
    for pattern in IGNORE_REGEXES:
        text = re.sub(pattern, "", text)
    return text.lower()


def gold_number(answer: str) -> str:
    """The gold number of a GSM8K answer: the text after the last '####'."""
    return answer.split("####")[-1].strip()


@register
class GSM8K(Task):
    """lm-eval `gsm8k`: 'Question: ..\\nAnswer:' with full worked answers as shots; exact match after a filter."""

    name = "gsm8k"
    default_num_fewshot = 5
    stop_strings = ("Question:", "</s>", "<|im_end|>")
    hub = ("openai/gsm8k", "main")
    strict_regex = STRICT_REGEX

    def __init__(
        self,
        *,
        filter: str = "flexible-extract",
        fewshot_data_files: str | None = None,
        fewshot_seed: int = 1234,
        **cfg,
    ) -> None:
        super().__init__(**cfg)
        if filter not in FILTERS:
            raise ValueError(f"filter={filter!r}: expected one of {FILTERS}")
        self.filter = filter
        self.fewshot_data_files = fewshot_data_files
        self.fewshot_seed = fewshot_seed
        self._pool: list[dict] | None = None
        self._sampler: SeededFewshotSampler | None = None

    def load_all_docs(self) -> list[dict]:
        rows, _ = load_rows(
            data_files=self.config.data_files, data_dir=self.config.data_dir, default_names=("test.jsonl",),
            hub_path=self.hub[0], hub_name=self.hub[1], hub_split="test", required=ROW_SCHEMA,
        )
        return [
            {"sample_id": f"{self.name}/test/{i}", "doc_index": i, "question": r["question"], "answer": r["answer"]}
            for i, r in enumerate(rows)
        ]

    def fewshot_pool(self) -> list[dict]:
        """The train split (shots are drawn from it); local file next to the test file when offline."""
        if self._pool is None:
            files, data_dir = self.fewshot_data_files, self.config.data_dir
            if files is None and self.config.data_files is not None:
                files = str(Path(self.config.data_files).with_name("train.jsonl"))
            self._pool, _ = load_rows(
                data_files=files, data_dir=None if files else data_dir, default_names=("train.jsonl",),
                hub_path=self.hub[0], hub_name=self.hub[1], hub_split="train", required=ROW_SCHEMA,
            )
        return self._pool

    def shots(self, doc: dict) -> list[tuple[str, str]]:
        """(question, target) pairs for this doc, chosen as lm-eval would for the same global position."""
        if self.num_fewshot == 0:
            return []
        pool = self.fewshot_pool()
        if self._sampler is None:
            self._sampler = SeededFewshotSampler(len(pool), seed=self.fewshot_seed)
        return [(pool[j]["question"], pool[j]["answer"]) for j in self._sampler.indices(doc["doc_index"], self.num_fewshot)]

    def render_question(self, question: str) -> str:
        return f"Question: {question}\nAnswer:"

    def prompt(self, doc: dict, chat: bool = False) -> str:
        shots = "".join(f"{self.render_question(q)} {a}\n\n" for q, a in self.shots(doc))
        return shots + self.render_question(doc["question"])

    def gold(self, doc: dict) -> str:
        """The reference string lm-eval compares with (before its ignore rules)."""
        return doc["answer"]

    def extract(self, completion: str, doc: dict) -> str:
        if self.filter == "strict-match":
            return regex_filter(completion, self.strict_regex)
        return regex_filter(completion, FLEXIBLE_REGEX, group_select=-1)

    def score(self, completion: str, doc: dict) -> Score:
        gold = normalize_for_match(self.gold(doc))
        flexible = regex_filter(completion, FLEXIBLE_REGEX, group_select=-1)
        strict = regex_filter(completion, self.strict_regex)
        verdicts = {
            "flexible-extract": normalize_for_match(flexible) == gold,
            "strict-match": normalize_for_match(strict) == gold,
        }
        extracted = flexible if self.filter == "flexible-extract" else strict
        return Score(
            correct=verdicts[self.filter],
            extracted=extracted,
            gold=gold_number(doc["answer"]),
            details={"filter": self.filter, "strict": strict, "flexible": flexible,
                     "strict_correct": verdicts["strict-match"], "flexible_correct": verdicts["flexible-extract"]},
        )


@register
class GSM8KCoT(GSM8K):
    """lm-eval `gsm8k_cot`: 8 fixed 'Q: .. A: .. The answer is N.' exemplars; the gold is the bare number."""

    name = "gsm8k_cot"
    default_num_fewshot = 8
    stop_strings = ("Q:", "</s>", "<|im_end|>")
    strict_regex = COT_STRICT_REGEX

    def shots(self, doc: dict) -> list[tuple[str, str]]:
        if self.num_fewshot > len(COT_EXEMPLARS):
            raise ValueError(f"num_fewshot={self.num_fewshot}: gsm8k_cot has {len(COT_EXEMPLARS)} exemplars")
        return list(COT_EXEMPLARS[: self.num_fewshot])

    def render_question(self, question: str) -> str:
        return f"Q: {question}\nA:"

    def gold(self, doc: dict) -> str:
        return gold_number(doc["answer"])

