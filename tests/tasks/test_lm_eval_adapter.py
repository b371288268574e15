"""The lm-eval adapter: lm_eval.simple_evaluate runs a local gsm8k through our decoding; its scores equal ours."""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import lm_eval
import lm_eval.tasks as lm_tasks
import pytest
import torch
import yaml
from lm_eval.tasks import TaskManager

import dllm_bench.lm_eval_adapter  # noqa: F401  (registers the model with lm-eval)
from dllm_bench.decoding import (
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    build_rule,
    generate,
)
from dllm_bench.lm_eval_adapter import DllmBenchLM
from dllm_bench.models import load_model
from dllm_bench.tasks import get_task

GEN, BLOCK, LIMIT = 16, 16, 3


@pytest.fixture(scope="module")
def lm_eval_run(tiny_llada_dir, fixtures_dir, tmp_path_factory):
    patch = pytest.MonkeyPatch()
    patch.setenv("HF_DATASETS_OFFLINE", "1")
    d = fixtures_dir / "gsm8k"
    stats = tmp_path_factory.mktemp("stats") / "stats.json"
    # lm-eval's own gsm8k.yaml, pointed at the local fixture files
    task_cfg = {
        "task": "gsm8k_local", "include": str(Path(lm_tasks.__file__).parent / "gsm8k" / "gsm8k.yaml"),
        "dataset_path": "json", "dataset_name": None,
        "dataset_kwargs": {"data_files": {"train": str(d / "train.jsonl"), "test": str(d / "test.jsonl")},
                           "cache_dir": str(tmp_path_factory.mktemp("hf"))},
    }
    yaml_dir = tmp_path_factory.mktemp("tasks")
    (yaml_dir / "gsm8k_local.yaml").write_text(yaml.safe_dump(task_cfg))
    results = lm_eval.simple_evaluate(
        model="dllm_bench",
        model_args={"pretrained": str(tiny_llada_dir), "rule": "frechet", "rule.delta": 0.25, "cache": "dual",
                    "gen_length": GEN, "block_length": BLOCK, "model.chat": False, "device": "cpu",
                    "stats_path": str(stats)},
        tasks=["gsm8k_local"], num_fewshot=1, limit=LIMIT, batch_size=LIMIT, log_samples=True,
        task_manager=TaskManager(include_path=str(yaml_dir)), random_seed=0, fewshot_random_seed=1234,
    )
    patch.undo()
    return results, json.loads(stats.read_text())


def test_simple_evaluate_scores_equal_our_scorer(lm_eval_run, fixtures_dir):
    results, stats = lm_eval_run
    samples = results["samples"]["gsm8k_local"]
    ours = get_task("gsm8k", data_dir=str(fixtures_dir / "gsm8k"), num_fewshot=1)
    docs = ours.docs()
    flexible = [s for s in samples if s["filter"] == "flexible-extract"]
    strict = [s for s in samples if s["filter"] == "strict-match"]
    assert len(flexible) == len(strict) == LIMIT
    for s in flexible:
        doc = docs[s["doc_id"]]
        assert ours.prompt(doc) == s["arguments"][0][0]  # same prompt text as lm-eval built
        score = ours.score(s["resps"][0][0], doc)
        assert score.extracted == s["filtered_resps"][0]
        assert score.correct == bool(s["exact_match"])
    for s in strict:
        score = ours.score(s["resps"][0][0], docs[s["doc_id"]])
        assert score.details["strict"] == s["filtered_resps"][0]
        assert score.details["strict_correct"] == bool(s["exact_match"])
    mean = sum(bool(s["exact_match"]) for s in flexible) / LIMIT
    assert results["results"]["gsm8k_local"]["exact_match,flexible-extract"] == pytest.approx(mean)
    assert stats["summary"]["requests"] == LIMIT and stats["summary"]["nfe"] >= LIMIT * GEN // BLOCK


def test_adapter_completions_equal_a_direct_decode(lm_eval_run, tiny_llada_dir, fixtures_dir):
    """The text lm-eval received is our engine's decode of the same prompt, cut at the stop id and strings."""
    results, _ = lm_eval_run
    sample = next(s for s in results["samples"]["gsm8k_local"] if s["filter"] == "flexible-extract")
    prompt = sample["arguments"][0][0]
    model = load_model(str(tiny_llada_dir), device="cpu")
    ids = torch.tensor([model.tokenizer.encode(prompt)])
    decoding = Decoding(GEN, BLOCK, build_policy("blocks"), build_rule("frechet", delta=0.25), build_cache("dual"))
    sampling = Sampling(seed=[0 ^ zlib.crc32(prompt.encode("utf-8"))])
    out = generate(model, ids, torch.ones_like(ids), DecodeSpec(decoding, sampling))
    tokens = out.tokens[0].tolist()
    stops = set(model.config.stop_token_ids)
    end = next((k for k, t in enumerate(tokens) if t in stops), len(tokens))
    text = model.tokenizer.decode(tokens[:end], skip_special_tokens=False)
    for stop in ("Question:", "</s>", "<|im_end|>"):
        text = text.split(stop)[0]
    assert sample["resps"][0][0] == text


def test_bad_model_args_are_refused_before_loading(tiny_llada_dir):
    with pytest.raises(ValueError, match="rule='fast' is not allowed: choose one of certainty_prior, credit, eb_sampler, .*frechet"):
        DllmBenchLM(pretrained=str(tiny_llada_dir), rule="fast")
    with pytest.raises(ValueError, match="gen_len=5 is not allowed: unknown key at the top level; allowed: .*gen_length"):
        DllmBenchLM(pretrained=str(tiny_llada_dir), gen_len=5)
    with pytest.raises(ValueError, match="mc_num=10"):
        DllmBenchLM(pretrained=str(tiny_llada_dir), mc_num=10, mc_batch_size=4)


def test_masked_loglikelihood_is_deterministic_and_sums_over_tokens(tiny_llada_dir):
    lm = DllmBenchLM(pretrained=str(tiny_llada_dir), mc_num=8, mc_batch_size=4, device="cpu")

    class Req:
        def __init__(self, args):
            self.args = args

    (a, _), (b, _) = lm.loglikelihood([Req(("2+2=", " 4")), Req(("2+2=", " 4"))])
    assert a == b and a < 0
    (c, _), = lm.loglikelihood([Req(("2+2=", " 4 and more text"))])
    assert c < a  # more target tokens, more negative log-likelihood


class _Req:
    def __init__(self, args):
        self.args = args


def test_rolling_windows_tile_the_document_and_the_loglikelihood_sums_them(tiny_llada_dir):
    text = "..12/..../2.3./.4.. then 1234/3412/2143/4321"
    lm = DllmBenchLM(pretrained=str(tiny_llada_dir), mc_num=8, mc_batch_size=4, device="cpu", max_length=8)
    tokens = lm.tokenizer.encode(text, add_special_tokens=False)
    windows = lm.rolling_windows(text)
    assert len(windows) > 3 and [tok for _, target in windows for tok in target] == tokens  # targets tile the text, in order
    assert windows[0][0] == [lm.tokenizer.bos_token_id]
    assert all(len(c) >= 1 and len(c) + len(t) <= 8 for c, t in windows)
    seed = 0 ^ zlib.crc32(text.encode("utf-8"))
    expected = sum(lm.masked_loglikelihood(c, t, seed + i) for i, (c, t) in enumerate(windows))
    (ll,) = lm.loglikelihood_rolling([_Req((text,))])
    assert ll == pytest.approx(expected) and ll < 0
    # a document that fits is one window: the masked estimate of all its tokens after BOS
    whole = DllmBenchLM(pretrained=str(tiny_llada_dir), mc_num=8, mc_batch_size=4, device="cpu")
    assert whole.loglikelihood_rolling([_Req((text,))]) == [whole.masked_loglikelihood(
        [whole.tokenizer.bos_token_id], tokens, seed)]
    assert whole.loglikelihood_rolling([_Req(("",))]) == [0]


def test_rolling_max_length_is_checked(tiny_llada_dir):
    with pytest.raises(ValueError, match="max_length=1"):
        DllmBenchLM(pretrained=str(tiny_llada_dir), max_length=1)
    with pytest.raises(ValueError, match="max_length=100000: more than"):
        DllmBenchLM(pretrained=str(tiny_llada_dir), max_length=100000)


def test_simple_evaluate_perplexity_task_uses_the_rolling_loglikelihood(tiny_llada_dir, tmp_path):
    """A local perplexity task (wikitext's output type and metrics) runs end to end; bits/byte equal our sums."""
    docs = [{"text": "..12/..../2.3./.4.. solved as 3412/1234/2341/4123"}, {"text": "1.../.2../..3./...4 is open"}]
    data = tmp_path / "ppl.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "tiny_ppl.yaml").write_text(yaml.safe_dump({
        "task": "tiny_ppl", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)},
                                                                       "cache_dir": str(tmp_path / "hf")},
        "test_split": "test", "output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
        "metric_list": [{"metric": "word_perplexity"}, {"metric": "byte_perplexity"}, {"metric": "bits_per_byte"}],
    }))
    model_args = {"pretrained": str(tiny_llada_dir), "device": "cpu", "mc_num": 8, "mc_batch_size": 4, "max_length": 16}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        results = lm_eval.simple_evaluate(model="dllm_bench", model_args=model_args, tasks=["tiny_ppl"],
                                          task_manager=TaskManager(include_path=str(tmp_path)), random_seed=0)
    lm = DllmBenchLM(**model_args)
    ll = lm.loglikelihood_rolling([_Req((d["text"],)) for d in docs])
    n_bytes = sum(len(d["text"].encode("utf-8")) for d in docs)
    got = results["results"]["tiny_ppl"]
    assert got["bits_per_byte,none"] == pytest.approx(-sum(ll) / n_bytes / math.log(2))
    assert got["byte_perplexity,none"] > 1 and got["word_perplexity,none"] > got["byte_perplexity,none"]
