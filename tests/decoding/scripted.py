"""A scripted stand-in network: every forward returns logits whose top-1 probabilities are given per call."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

VOCAB = 16
MASK = 15
EOS = 14


class ScriptedNetwork:
    """Callable like the real network; call n gives answer position j top-1 probability ``script[n][j]``.

    The top-1 token at answer position j is ``tokens[j]`` (default 1 + j % 10). Positions not scripted get
    probability 1/VOCAB spread evenly. ``calls`` records (batch, input length) of every forward.
    """

    def __init__(self, prompt_length: int, script: list[list[float]], tokens: list[int] | None = None):
        self.P = prompt_length
        self.script = script
        self.tokens = tokens
        self.calls: list[tuple[int, int]] = []
        self.config = SimpleNamespace(mask_token_id=MASK, stop_token_ids=(EOS,), eos_token_id=EOS, pad_token_id=EOS)

    def __call__(self, input_ids: torch.Tensor, attention_mask=None, cache=None, start: int = 0, **kw) -> torch.Tensor:
        b, t = input_ids.shape
        n = len(self.calls)
        self.calls.append((b, t))
        probs = self.script[min(n, len(self.script) - 1)]
        logits = torch.zeros(b, t, VOCAB, dtype=torch.float64)
        for pos in range(t):
            j = start + pos - self.P
            if j < 0 or j >= len(probs) or probs[j] <= 0:
                continue
            p = probs[j]
            top = self.tokens[j] if self.tokens else 1 + j % 10
            rest = (1 - p) / (VOCAB - 1)
            logits[:, pos] = math.log(rest) if rest > 0 else -1e9
            logits[:, pos, top] = math.log(p)
        return logits
