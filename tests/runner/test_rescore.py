"""Rescoring stored completions under the other scoring mode: exact round trip, never a model load, its own run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from dllm_bench.models.tiny_format import make_random_checkpoint
from dllm_bench.rescore import main as rescore_main
from dllm_bench.runner.execute import execute
from dllm_bench.runner.interface import Engine, Generation
from dllm_bench.runner.rescore import RescoreError, rescore
from dllm_bench.runner.store import read_jsonl
from dllm_bench.tasks import get_task

REPO = Path(__file__).resolve().parents[2]
EOS, EOS_TEXT = 1, "<eos>"
STYLES = ("untagged", "fenced", "eos", "untagged", "untagged", "eos")


class CharTokenizer:
    """One id per character (ord + 2); id 1 is EOS, written `<eos>`; the chat template is the text itself."""

    eos_token_id = EOS
    chat_template = "{{ messages[0]['content'] }}"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = []
        for k, part in enumerate(text.split(EOS_TEXT)):
            ids += ([EOS] if k else []) + [ord(c) + 2 for c in part]
        return ids

    def __call__(self, text: str) -> dict:
        return {"input_ids": self.encode(text)}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(("" if skip_special_tokens else EOS_TEXT) if i == EOS else chr(i - 2) for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False) -> str:
        return messages[0]["content"]


def answers(docs: list[dict]) -> list[str]:
    """Answer styles whose verdicts differ between the modes (HumanEval/0-5, canonical bodies)."""
    out = []
    for d, style in zip(docs, STYLES):
        full = d["prompt"] + d["canonical_solution"]
        if style == "untagged":  # lm_eval passes, paper extracts nothing
            out.append(f"```\n{full}```")
        elif style == "fenced":  # both pass
            out.append(f"```python\n{full}```")
        else:  # an early EOS: lm_eval stops there, the LLaDA evaluation keeps the text after it
            out.append(f"```python\n{d['prompt']}{EOS_TEXT}{d['canonical_solution']}```{EOS_TEXT}{EOS_TEXT}")
    return out


class ScriptedEngine(Engine):
    """Returns fixed answer texts as character ids (no model)."""

    def __init__(self, texts: dict[str, str]):
        self.tokenizer = CharTokenizer()
        self.stop_token_ids = (EOS,)
        self.device_name = "scripted"
        self.texts = texts

    def generate(self, prompts, docs, seeds, stop_strings, **extra):
        out = []
        for d in docs:
            ids = self.tokenizer.encode(self.texts[d["sample_id"]])
            counts = {"tokens": len(ids), "tokens_non_eos": sum(i != EOS for i in ids),
                      "tokens_canvas_non_eos": len(ids), "tokens_gen_length": len(ids)}
            out.append(Generation(ids=ids, nfe=4, steps=4, token_counts=counts, decode_time_s=0.01))
        return out


@pytest.fixture()
def generated(compose_cfg, tmp_path):
    """A paper-scored HumanEval run (6 docs) by a scripted engine; the model folder is deleted afterwards."""
    model = make_random_checkpoint(tmp_path / "model", "llada", seed=0)
    docs = get_task("humaneval").docs()[:6]
    texts = dict(zip([d["sample_id"] for d in docs], answers(docs)))
    cfg = compose_cfg(f"model.name_or_path={model}", f"output_dir={tmp_path / 'results'}", "progress=false",
                      "task=humaneval", "task.scoring=paper", "limit=6", "batch_size=3", "warmup=0", "name=he",
                      "gen_length=32", "block_length=32")
    row = execute(cfg, engine_factory=lambda c, ctx: ScriptedEngine(texts))
    shutil.rmtree(model)
    return row, tmp_path / "results" / "he"


def test_samples_keep_both_completions_and_both_counts(generated):
    row, folder = generated
    assert "-paper-" in row["run_id"] and row["task.scoring"] == "paper"
    rows = read_jsonl(folder / row["run_id"] / "samples.jsonl")
    for r in rows:
        assert r["completion"] == r["completion_paper"] and r["scoring"] == "paper"
        assert r["raw_completion"].count(EOS_TEXT) == (3 if STYLES[r["doc_index"]] == "eos" else 0)
        assert EOS_TEXT not in r["completion_paper"] and EOS_TEXT not in r["completion_lm_eval"]
    cut = rows[2]  # the early-EOS answer: lm_eval stops at the first EOS, paper keeps the text after it
    assert len(cut["completion_lm_eval"]) < len(cut["completion_paper"])
    assert cut["tokens_cut_paper"] == len(cut["completion_paper"])  # re-tokenized ids != EOS
    assert row["tokens_total"] == row["tokens_cut_paper_total"] == sum(r["tokens_cut_paper"] for r in rows)
    assert row["tokens_cut_total"] == sum(r["tokens_cut"] for r in rows)


def test_round_trip_returns_the_original_accuracy_without_a_model(generated, capsys):
    row, folder = generated
    assert not Path(row["model.name_or_path"]).exists()  # any model load would fail
    (lm,) = rescore(folder / row["run_id"], "lm_eval")
    assert lm["run_id"] == f"{row['run_id']}.lm_eval" and lm["task.scoring"] == "lm_eval"
    assert lm["rescored_from"] == row["run_id"] and lm["nfe_total"] == row["nfe_total"]
    assert (row["n_correct"], lm["n_correct"]) == (3, 4)  # paper: early-EOS rows pass, untagged fences fail
    back_cli = [str(folder / lm["run_id"]), "scoring=paper"]
    rescore_main(back_cli)
    assert "accuracy" in capsys.readouterr().out
    back = json.loads((folder / f"{row['run_id']}.paper" / "run.json").read_text())
    assert back["summary"]["accuracy"] == row["accuracy"] and back["generation_run_id"] == row["run_id"]
    assert back["scoring_versions"]["math-verify"] == lm["math_verify"] == metadata.version("math-verify")
    assert back["summary"]["tokens_total"] == row["tokens_total"]
    original = read_jsonl(folder / row["run_id"] / "samples.jsonl")
    again = read_jsonl(folder / back["run_id"] / "samples.jsonl")
    assert [r["correct"] for r in again] == [r["correct"] for r in original]
    runs = (folder / "runs.csv").read_text().splitlines()
    assert len(runs) == 4 and runs[0].split(",")[0] == "run_id"


def test_folder_rescoring_skips_runs_already_in_the_mode(generated):
    row, folder = generated
    assert [r["run_id"] for r in rescore(folder, "lm_eval")] == [f"{row['run_id']}.lm_eval"]
    assert rescore(folder, "paper") == []  # the generation run is paper; its lm_eval rescoring is skipped too
    assert rescore(folder, "lm_eval") == []  # done already
    assert rescore(folder / row["run_id"], "paper")[0]["run_id"] == f"{row['run_id']}.paper"  # a run: always


def test_bad_input_is_one_line(tmp_path, generated):
    row, folder = generated
    with pytest.raises(RescoreError, match="is not a run folder"):
        rescore(tmp_path / "model_gone", "paper")
    old = folder / row["run_id"] / "samples.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "completion_lm_eval"}) + "\n"
                           for r in read_jsonl(old)))
    with pytest.raises(RescoreError, match="completion_lm_eval"):
        rescore(folder / row["run_id"], "lm_eval")
    proc = subprocess.run([sys.executable, "-m", "dllm_bench.rescore", str(folder), "scoring=papers"],
                          capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert proc.returncode == 2 and "scoring='papers' is not allowed" in proc.stderr
