"""The Python API: run an evaluation from the command line's configuration keys and get its rows back, and turn
prompts into the ``input_ids`` that :func:`dllm_bench.decoding.generate` takes.

    import dllm_bench
    rows = dllm_bench.evaluate({"rule": "frechet", "rule.delta": 0.2, "cache": "dual", "limit": 50})
    rows["correct"].mean(), rows.attrs["run"]["tokens_per_s"]

    model = dllm_bench.load_model("dllm_bench/tiny/checkpoints/tiny_llada")
    ids, mask = dllm_bench.encode_prompts(model, ["..../..1./3.../..32"])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch


def evaluate(overrides: Mapping[str, Any] | None = None, *, experiment: str | None = None) -> pd.DataFrame:
    """Run (or resume) the run ``dllm-bench [experiment=<experiment>] key=value ...`` would, in this process.

    ``overrides`` are the command line's keys and values (``{"rule": "frechet", "rule.delta": 0.2}``: a config
    group's option or a dotted key). Returns one row per sample (the run's samples.jsonl, in document order) with
    the run's summary row (runs.csv) in ``.attrs["run"]``. Refusals are the command's one-line
    ``dllm_bench.runner.validate.ConfigError``.
    """
    from dllm_bench.report.runs import compose_config
    from dllm_bench.runner.execute import execute
    from dllm_bench.runner.store import read_jsonl

    cfg = compose_config(experiment, dict(overrides or {}))
    cfg.pop("hydra", None)
    run = execute(cfg)
    if run is None:  # a rank other than 0 of a distributed run: rank 0 holds the rows
        return pd.DataFrame()
    folder = Path(cfg["output_dir"]) / str(cfg["name"]) / str(run["run_id"])
    frame = pd.DataFrame(read_jsonl(folder / "samples.jsonl"))
    if "doc_index" in frame:
        frame = frame.sort_values("doc_index", kind="stable").reset_index(drop=True)
    frame.attrs["run"] = dict(run)
    return frame


def encode_prompts(model: Any, prompts: Sequence[str], *, chat: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``input_ids`` and ``attention_mask`` [B, P] for ``generate``, as the runner builds them: each
    prompt as the one user turn of the model's chat template (``chat=True``) or as raw text, tokenized by the
    model's tokenizer and padded on the left with its pad id."""
    from dllm_bench.tasks.chat import chat_wrap, encode_left_padded

    texts = [chat_wrap(p, model.tokenizer) for p in prompts] if chat else list(prompts)
    return encode_left_padded(model.tokenizer, texts, chat, model.config.pad_token_id)
