"""GSM8K extraction and scoring: real rows, the formats models write, and equality with lm-eval's own filters."""

from __future__ import annotations

from pathlib import Path

import pytest

from dllm_bench.tasks import get_task

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


@pytest.fixture(scope="module")
def gsm8k(fixtures_dir):
    return get_task("gsm8k", data_dir=str(fixtures_dir / "gsm8k"))


def test_gold_rationale_scores_correct_and_perturbed_wrong(gsm8k):
    for doc in gsm8k.docs():
        assert gsm8k.score(doc["answer"], doc).correct, doc["sample_id"]
        gold = doc["answer"].split("####")[-1].strip().replace(",", "")
        assert not gsm8k.score(f"The answer is {int(gold) + 1}.", doc).correct


@pytest.mark.parametrize("completion", [
    "She makes 9 * 2 = $18 a day.\n#### 18", "The answer is 18.", "So she earns $18", "#### 18\n\n",
    "The answer is $18.", "Eggs: 16 - 3 - 4 = 9, so 9 * 2 = 18", "so she makes $\\boxed{18}$ dollars",
])
def test_model_formats_of_the_right_answer(gsm8k, completion):
    doc = gsm8k.docs()[0]  # Janet's ducks: 18
    score = gsm8k.score(completion, doc)
    assert score.correct, score
    assert score.gold == "18"


def test_lm_eval_rule_keeps_decimal_zeros(gsm8k):
    """lm-eval's exact match is a string match: '18.00' is not '18' (kept for comparability)."""
    assert not gsm8k.score("Total: 18.00", gsm8k.docs()[0]).correct


def test_thousands_commas_and_strict_filter(fixtures_dir):
    doc = {"sample_id": "x", "doc_index": 0, "question": "q", "answer": "work\n#### 1234"}
    flexible = get_task("gsm8k", data_dir=str(fixtures_dir / "gsm8k"))
    strict = get_task("gsm8k", data_dir=str(fixtures_dir / "gsm8k"), filter="strict-match")
    assert flexible.score("so 1,234 dollars", doc).correct
    assert not strict.score("so 1,234 dollars", doc).correct
    assert strict.score("so\n#### 1,234", doc).correct
    assert strict.extract("no marker", doc) == "[invalid]"
    with pytest.raises(ValueError, match="filter='loose'"):
        get_task("gsm8k", filter="loose")


COMPLETIONS = [
    "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18",
    "The answer is 18.", "$18", "It is 1,018.", "-5", "no number here", "3.5 then 18.", "Question: next",
    "#### -12", "#### 18.", "answer 1.8e1", "17\n\nQuestion: 5", "$1,234.50.",
]


@pytest.mark.parametrize("task_name", ["gsm8k", "gsm8k_cot"])
def test_scores_equal_lm_eval_filters_and_exact_match(fixtures_dir, task_name):
    """Our flexible/strict verdicts equal lm-eval's RegexFilter + exact_match with the yaml's ignore rules."""
    import lm_eval.tasks
    import yaml
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.filters.extraction import RegexFilter

    cfg_file = Path(lm_eval.tasks.__file__).parent / "gsm8k" / ("gsm8k.yaml" if task_name == "gsm8k" else "gsm8k-cot.yaml")
    cfg = yaml.safe_load(cfg_file.read_text())
    metric = cfg["metric_list"][0]
    filters = {f["name"]: f["filter"][0] for f in cfg["filter_list"]}
    task = get_task(task_name, data_dir=str(fixtures_dir / "gsm8k"))
    for doc in task.docs()[:5]:
        target = doc["answer"] if task_name == "gsm8k" else doc["answer"].split("####")[-1].strip()
        for completion in [*COMPLETIONS, doc["answer"]]:
            ours = task.score(completion, doc).details
            for name, key in (("flexible-extract", "flexible_correct"), ("strict-match", "strict_correct")):
                f = filters[name]
                extracted = list(RegexFilter(f["regex_pattern"], f.get("group_select", 0)).apply([[completion]], [doc]))[0][0]
                theirs = exact_match_hf_evaluate([extracted], [target], regexes_to_ignore=metric["regexes_to_ignore"],
                                                 ignore_case=True, ignore_punctuation=False)["exact_match"]
                assert bool(theirs) == ours[key], (name, completion, extracted)
