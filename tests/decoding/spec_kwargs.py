"""Test helper: a ``DecodeSpec`` from flat keywords, and ``generate`` through one (tests only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dllm_bench.decoding import (
    Accounting,
    DecodeSpec,
    Decoding,
    GenerationOutput,
    NoCache,
    Sampling,
    TokenIds,
    generate,
)


def decode_spec(*, gen_length: int, block_length: int, policy: Any, rule: Any = None, cache: Any = None,
                early_stop: bool = False, confidence: str | None = None,
                confidence_precision: str | torch.dtype = "float64", confidence_mask_in_softmax: bool = True,
                temperature: float = 0.0, cfg_scale: float = 0.0, forbidden_token_ids: Sequence[int] = (),
                seed: int | Sequence[int] = 0, trace: bool = False, tokenizer: Any = None,
                stop_strings: Sequence[str] = (), mask_token_id: int | None = None,
                stop_token_ids: Sequence[int] | None = None, pad_token_id: int | None = None) -> DecodeSpec:
    """Each keyword into its group of the spec (``cache`` None = no cache)."""
    return DecodeSpec(
        Decoding(gen_length, block_length, policy, rule, NoCache() if cache is None else cache, early_stop),
        Sampling(confidence, confidence_precision, confidence_mask_in_softmax, temperature, cfg_scale,
                 forbidden_token_ids, seed),
        Accounting(trace, tokenizer, stop_strings),
        TokenIds(mask_token_id, stop_token_ids, pad_token_id),
    )


def spec_generate(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                  reference: torch.Tensor | None = None, model_kwargs: dict | None = None,
                  **spec: Any) -> GenerationOutput:
    """``generate(model, input_ids, attention_mask, decode_spec(**spec), ...)``."""
    return generate(model, input_ids, attention_mask, decode_spec(**spec), reference=reference,
                    model_kwargs=model_kwargs)
