"""Rule-based answer extraction for free-form and multiple-choice answers (MathVista, MathVerse)."""

from __future__ import annotations

import re
from collections.abc import Callable

from dllm_bench.tasks.minerva_math import last_boxed_content

# A judge maps (completion, doc) to the extracted answer text, e.g. an LLM call; None = rules only.
Judge = Callable[[str, dict], str]

_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d*\.\d+|-?\d+")
_ANSWER_IS = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*[:\s]*(.+)", re.IGNORECASE)


def strip_thinking(completion: str) -> str:
    """The text after the last `</think>` (LLaDA-V think mode), else the whole completion."""
    pos = completion.rfind("</think>")
    return completion[pos + len("</think>") :] if pos >= 0 else completion


def answer_span(completion: str) -> str:
    """The part of a completion that states the answer: last \\boxed{}, else after the last 'answer is', else all."""
    text = strip_thinking(completion)
    boxed = last_boxed_content(text)
    if boxed is not None:
        return boxed.strip()
    matches = list(_ANSWER_IS.finditer(text))
    if matches:
        return matches[-1].group(1).strip().splitlines()[0].strip()
    return text.strip()


def clean_answer(text: str) -> str:
    """Drop wrapping $, \\text{}, quotes, a trailing period and surrounding spaces."""
    text = text.strip().strip("*").strip().strip("$").strip()
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", text)
    text = text.strip().strip("\"'").strip()
    return text[:-1].strip() if text.endswith(".") else text


def last_number(text: str) -> str | None:
    """The last number in `text` with thousands commas removed ('1,234.5' -> '1234.5')."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def choice_letter(text: str, letters: str, choices: list[str] | None = None) -> str | None:
    """The option letter a text names: the last '(B)', else the last standalone 'B', else a choice's text."""
    span = text.strip()
    if len(span) == 1 and span.upper() in letters:
        return span.upper()
    in_parens = re.findall(rf"\(([{letters}])\)", span)
    if in_parens:
        return in_parens[-1]
    alone = re.findall(rf"(?<![A-Za-z0-9'])([{letters}])(?![A-Za-z0-9'])", span)
    if alone:
        return alone[-1]
    if choices:
        lowered = span.lower()
        best = [(lowered.rfind(c.lower()), i) for i, c in enumerate(choices) if c and c.lower() in lowered]
        if best:
            return letters[max(best)[1]]
    return None


def levenshtein(a: str, b: str) -> int:
    """Edit distance (MathVista maps unrecognised multiple-choice answers to the nearest choice)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]
