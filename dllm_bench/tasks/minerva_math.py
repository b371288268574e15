"""MATH with lm-eval's `minerva_math` 4-shot prompt (full test set or MATH-500), judged by math-verify."""

from __future__ import annotations

from dllm_bench.tasks.base import Score, Task, register
from dllm_bench.tasks.data import TEXT, check_fields, load_hub_rows, load_rows, read_rows, resolve_local
from dllm_bench.tasks.minerva_paper import paper_exemplars, paper_gold

# The Minerva (Lewkowycz et al., 2022) 4-shot exemplars, as lm-eval's minerva_math utils list them.
MINERVA_EXEMPLARS = (
    ("Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.",
     "The expressions inside each square root must be non-negative. Therefore, $x-2 \\ge 0$, so $x\\ge2$, and "
     "$5 - x \\ge 0$, so $x \\le 5$. Also, the denominator cannot be equal to zero, so $5-x>0$, which gives $x<5$. "
     "Therefore, the domain of the expression is $\\boxed{[2,5)}$.\nFinal Answer: The final answer is $[2,5)$. "
     "I hope it is correct."),
    ("If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find $\\det (\\mathbf{A} \\mathbf{B}).$",
     "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})(\\det \\mathbf{B}) = (2)(12) = "
     "\\boxed{24}.$\nFinal Answer: The final answer is $24$. I hope it is correct."),
    ("Terrell usually lifts two 20-pound weights 12 times. If he uses two 15-pound weights instead, how many "
     "times must Terrell lift them in order to lift the same total weight?",
     "If Terrell lifts two 20-pound weights 12 times, he lifts a total of $2\\cdot 12\\cdot20=480$ pounds of "
     "weight.  If he lifts two 15-pound weights instead for $n$ times, he will lift a total of "
     "$2\\cdot15\\cdot n=30n$ pounds of weight.  Equating this to 480 pounds, we can solve for $n$:\n"
     "\\begin{align*}\n30n&=480\\\\\n\\Rightarrow\\qquad n&=480/30=\\boxed{16}\n\\end{align*}\n"
     "Final Answer: The final answer is $16$. I hope it is correct."),
    ("If the system of equations\n\n\\begin{align*}\n6x-4y&=a,\\\\\n6y-9x &=b.\n\\end{align*}has a solution "
     "$(x, y)$ where $x$ and $y$ are both nonzero,\nfind $\\frac{a}{b},$ assuming $b$ is nonzero.",
     "If we multiply the first equation by $-\\frac{3}{2}$, we obtain\n\n$$6y-9x=-\\frac{3}{2}a.$$Since we also "
     "know that $6y-9x=b$, we have\n\n$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}=\\boxed{-\\frac{2}{3}}.$$\n"
     "Final Answer: The final answer is $-\\frac{2}{3}$. I hope it is correct."),
)

# lm-eval 0.4.8's copy (the papers' prompts): three one-character differences, see minerva_paper.py.
PAPER_EXEMPLARS = paper_exemplars(MINERVA_EXEMPLARS)

ROW_SCHEMA = {"problem": TEXT, "solution": TEXT}
HENDRYCKS_SUBJECTS = (
    "algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory", "prealgebra",
    "precalculus",
)


def last_boxed_content(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed x`) in `text`, braces balanced."""
    idx = text.rfind("\\boxed")
    if idx < 0:
        idx = text.rfind("\\fbox")
        if idx < 0:
            return None
    rest = text[idx:]
    brace = rest.find("{")
    head = rest[: brace if brace >= 0 else len(rest)]
    if head.startswith("\\boxed ") and (brace < 0 or " " in head):
        return rest[len("\\boxed ") :].split("$")[0].strip()
    if brace < 0:
        return None
    depth = 0
    for i in range(brace, len(rest)):
        if rest[i] == "{":
            depth += 1
        elif rest[i] == "}":
            depth -= 1
            if depth == 0:
                return rest[brace + 1 : i]
    return None


def minerva_final_answer(completion: str) -> str | None:
    """The text between 'Final Answer: The final answer is ' and '. I hope it is correct.' (Minerva format)."""
    marker = "Final Answer: The final answer is "
    pos = completion.rfind(marker)
    if pos < 0:
        return None
    tail = completion[pos + len(marker) :]
    end = tail.find(". I hope it is correct.")
    return (tail if end < 0 else tail[:end]).strip()


def verify_text(gold_text: str, completion: str) -> tuple[bool, str | None]:
    """math-verify: `verify(parse(gold_text), parse(completion))`; (verdict, the completion's parsed answer)."""
    import threading

    from math_verify import parse, verify

    # math-verify's time limits use SIGALRM, which exists only in the main thread
    limit = 5 if threading.current_thread() is threading.main_thread() else None
    gold = parse(gold_text, parsing_timeout=limit)
    pred = parse(completion, parsing_timeout=limit)
    extracted = pred[-1] if pred else None
    return bool(gold and pred and verify(gold, pred, timeout_seconds=limit)), extracted


def math_equivalent(gold_latex: str, completion: str) -> tuple[bool, str | None]:
    """Is the completion's final answer equal to one gold answer (`\\boxed{gold_latex}`)? (math-verify)."""
    return verify_text(f"$\\boxed{{{gold_latex}}}$", completion)


@register
class MinervaMath(Task):
    """lm-eval `minerva_math` prompts on the full MATH test set (5000); equivalence by math-verify.

    scoring=lm_eval: current lm-eval's exemplars; gold = what math-verify reads in the reference solution
    (the set, where the solution boxes several answers side by side). scoring=paper: lm-eval 0.4.8's
    exemplars; gold = 0.4.8's Minerva-normalised last box, parsed without `$` (as the papers scored).
    """

    name = "minerva_math"
    default_num_fewshot = 4
    stop_strings = ("Problem:",)
    local_names = ("math_test_full5000.jsonl", "test.jsonl")

    def load_all_docs(self) -> list[dict]:
        local = resolve_local(self.config.data_files, self.config.data_dir, self.local_names)
        if local is not None:
            rows, source = check_fields(read_rows(local), ROW_SCHEMA, str(local)), str(local)
        else:
            rows, source = [], "hub:EleutherAI/hendrycks_math"
            for subject in HENDRYCKS_SUBJECTS:
                rows += load_hub_rows("EleutherAI/hendrycks_math", subject, "test")
        return self._docs_from(rows, source)

    def _docs_from(self, rows: list[dict], source: str) -> list[dict]:
        """Rows to docs with a stable sample_id, the gold answer (the `answer` field, else the last box) and
        0.4.8's normalised gold (`answer_paper`)."""
        docs = []
        for i, r in enumerate(rows):
            gold = r.get("answer") or last_boxed_content(r["solution"])
            if gold is None:
                raise ValueError(f"{source}: row {i} field 'solution' has no \\boxed{{}} answer")
            docs.append({
                "sample_id": str(r.get("unique_id") or f"{self.name}/{r.get('idx', i)}"),
                "doc_index": i, "problem": r["problem"], "solution": r["solution"], "answer": gold,
                "answer_paper": paper_gold(r["solution"]) or "",
                "subject": r.get("subject") or r.get("type"), "level": r.get("level"),
            })
        return docs

    @property
    def exemplars(self) -> tuple[tuple[str, str], ...]:
        """The fixed 4-shot exemplars of the scoring mode's lm-eval version."""
        return PAPER_EXEMPLARS if self.scoring == "paper" else MINERVA_EXEMPLARS

    def prompt(self, doc: dict, chat: bool = False) -> str:
        if self.num_fewshot > len(self.exemplars):
            raise ValueError(f"num_fewshot={self.num_fewshot}: minerva_math has {len(self.exemplars)} exemplars")
        shots = "".join(f"Problem:\n{p}\n\nSolution: {s}\n\n" for p, s in self.exemplars[: self.num_fewshot])
        return f"{shots}Problem:\n{doc['problem']}\n\nSolution:"

    def extract(self, completion: str, doc: dict) -> str | None:
        """The answer a reader would take: the last \\boxed{}, else the Minerva 'final answer is' text."""
        boxed = last_boxed_content(completion)
        return boxed if boxed is not None else minerva_final_answer(completion)

    def score(self, completion: str, doc: dict) -> Score:
        if self.scoring == "paper":
            gold_text, gold = doc["answer_paper"], doc["answer_paper"]
        else:
            gold_text, gold = doc["solution"], doc["answer"]
        correct, parsed = verify_text(gold_text, completion)
        return Score(correct=correct, extracted=self.extract(completion, doc), gold=gold,
                     details={"math_verify_parsed": None if parsed is None else str(parsed), "scoring": self.scoring})


@register
class MinervaMath500(MinervaMath):
    """The same prompt and scorer on MATH-500 (the PRM800K 500-problem test subset)."""

    name = "minerva_math500"
    local_names = ("math500_test.jsonl", "test.jsonl")

    def load_all_docs(self) -> list[dict]:
        if self.config.data_files is None and self.config.data_dir is None:
            rows, _ = load_rows(data_files=None, data_dir=None, default_names=(), hub_path="HuggingFaceH4/MATH-500",
                                hub_name=None, hub_split="test", required=ROW_SCHEMA)
            return self._docs_from(rows, "hub:HuggingFaceH4/MATH-500")
        return super().load_all_docs()
