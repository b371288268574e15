"""The tiny LLaDA-V end to end through the decoding engine: every rule, prefix/dual/dLLM cache, batching."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

import dllm_bench.models
from dllm_bench.decoding import (
    DecodeSpec,
    Decoding,
    Sampling,
    build_cache,
    build_policy,
    build_rule,
    generate,
)
from dllm_bench.models.llada_v import LLaDAV, add_image_placeholders, forbidden_token_ids

GEN, BLOCK, STEPS = 8, 4, 4
RULES = {
    "topk": ({}, STEPS),
    "threshold": ({"threshold": 0.9}, None),
    "factor": ({"f": 1.0}, None),
    "frechet": ({"delta": 0.25}, None),
}


def _batch(model: LLaDAV, png_images: list[Path], rows: list[int]):
    questions = ["What is in the picture?", "Count the shapes.", "Say hi."]
    images = [[Image.open(png_images[0])], [Image.open(png_images[1]), Image.open(png_images[4])], []]
    prompts = [
        model.tokenizer.apply_chat_template(
            [{"role": "user", "content": add_image_placeholders(questions[i], len(images[i])) + " /think"}],
            tokenize=False,
        )
        for i in rows
    ]
    return model.build_inputs(prompts, [images[i] for i in rows], gen_length=GEN)


def _decode(model: LLaDAV, batch, rule: str, cache: str, **cache_params) -> torch.Tensor:
    params, steps = RULES[rule]
    decoding = Decoding(GEN, BLOCK, build_policy("blocks", steps=steps), build_rule(rule, **params),
                        build_cache(cache, **cache_params))
    spec = DecodeSpec(decoding, Sampling(forbidden_token_ids=forbidden_token_ids(model.tokenizer)))
    out = generate(model, batch.input_ids, batch.attention_mask, spec, model_kwargs=batch.model_kwargs)
    return out.tokens


_BATCHED: dict[tuple[str, str], torch.Tensor] = {}


def _batched(model: LLaDAV, png_images: list[Path], rule: str, cache: str) -> torch.Tensor:
    """Rows 0-2 decoded together (memoised: two tests look at the same run)."""
    if (rule, cache) not in _BATCHED:
        _BATCHED[rule, cache] = _decode(model, _batch(model, png_images, [0, 1, 2]), rule, cache)
    return _BATCHED[rule, cache]


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_rule_and_cache_decodes_image_rows(
    tiny_llada_v: LLaDAV, png_images: list[Path], rule: str, cache: str
) -> None:
    m = tiny_llada_v
    together = _batched(m, png_images, rule, cache)
    assert together.shape == (3, GEN)
    assert not (together == m.config.mask_token_id).any()
    forbidden = torch.tensor(forbidden_token_ids(m.tokenizer))
    assert not torch.isin(together, forbidden).any()


@pytest.mark.parametrize(
    ("rule", "cache"),
    [("topk", "none"), ("threshold", "prefix"), ("factor", "dual"), ("frechet", "prefix"), ("frechet", "dual")],
)
def test_batched_equals_alone(tiny_llada_v: LLaDAV, png_images: list[Path], rule: str, cache: str) -> None:
    """Each row decodes to the same tokens alone as in a left-padded batch with other images (or none)."""
    together = _batched(tiny_llada_v, png_images, rule, cache)
    for i in range(3):
        alone = _decode(tiny_llada_v, _batch(tiny_llada_v, png_images, [i]), rule, cache)
        assert torch.equal(together[i], alone[0]), (rule, cache, i)


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_kv_cache_refreshed_every_step_equals_no_cache(tiny_llada_v: LLaDAV, png_images: list[Path], cache: str) -> None:
    """With a refresh at every step the cached path computes exactly the uncached logits (image rows included)."""
    batch = _batch(tiny_llada_v, png_images, [0, 1, 2])
    plain = _batched(tiny_llada_v, png_images, "topk", "none")
    cached = _decode(tiny_llada_v, batch, "topk", cache, refresh_every=1)
    assert torch.equal(plain, cached)


def test_dllm_cache_runs_with_images(tiny_llada_v: LLaDAV, png_images: list[Path]) -> None:
    batch = _batch(tiny_llada_v, png_images, [0, 1, 2])
    out = _decode(tiny_llada_v, batch, "frechet", "dllm", prompt_interval=4, response_interval=2, verify_ratio=0.25)
    assert out.shape == (3, GEN) and not (out == tiny_llada_v.config.mask_token_id).any()


def test_placeholders_and_forbidden_ids() -> None:
    assert add_image_placeholders("Q?", 2) == "<image> <image>\nQ?"
    assert add_image_placeholders("<image>\nQ?", 1) == "<image>\nQ?"
    assert add_image_placeholders("Q?", 0) == "Q?"
    chat = "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nQ?<|eot_id|>"
    assert add_image_placeholders(chat, 1) == "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\n<image>\nQ?<|eot_id|>"
    from transformers import PreTrainedTokenizerFast

    real = Path(dllm_bench.models.__file__).parent / "reference_configs" / "llada-8b-instruct"
    import json

    decoder = json.loads((real / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    by_text = {v["content"]: int(k) for k, v in decoder.items()}

    class Vocab:  # the real LLaDA special-token ids, without the 4 MiB tokenizer.json
        unk_token_id = None

        def convert_tokens_to_ids(self, tok: str) -> int | None:
            return by_text.get(tok)

    assert forbidden_token_ids(Vocab()) == (126080, 126081, 126346, 126347)
    assert PreTrainedTokenizerFast is not None


def test_real_mathvista_rows_end_to_end(tiny_llada_v: LLaDAV, tmp_path: Path) -> None:
    """Real testmini rows -> tasks-layer prompt -> images from a folder -> LLaDA-V inputs -> decode -> score."""
    import json

    from llada_v_images import write_png

    from dllm_bench.tasks import get_task
    from dllm_bench.tasks.chat import render_prompt
    from dllm_bench.tasks.images import DocImages

    data = Path(__file__).parent.parent / "fixtures" / "tasks" / "mathvista" / "testmini.json"
    rows = json.loads(data.read_text())
    for pid in list(rows)[:3]:
        meta, path = rows[pid]["metadata"], tmp_path / rows[pid]["image"]
        path.parent.mkdir(exist_ok=True)
        write_png(path, max(1, meta["img_width"] // 16), max(1, meta["img_height"] // 16), seed=int(pid))
    task = get_task("mathvista", data_dir=str(data.parent), limit=3)
    docs = task.docs()
    images = DocImages(tmp_path, hub=None)
    m = tiny_llada_v
    prompts = [render_prompt(task, doc, m.tokenizer, chat=True) for doc in docs]
    batch = m.build_inputs(prompts, [images(d) for d in docs], gen_length=GEN)
    assert [len(t) for t in batch.image_tokens] == [1, 1, 1]
    decoding = Decoding(GEN, GEN, build_policy("blocks"), build_rule("frechet", delta=0.25),
                        build_cache("prefix", refresh_every=4))
    spec = DecodeSpec(decoding, Sampling(forbidden_token_ids=forbidden_token_ids(m.tokenizer)))
    out = generate(m, batch.input_ids, batch.attention_mask, spec, model_kwargs=batch.model_kwargs)
    for doc, ids in zip(docs, out.tokens.tolist()):
        score = task.score(m.tokenizer.decode(ids, skip_special_tokens=True), doc)
        assert score.gold == doc["answer"]
