"""Random-weight networks at a given architecture: the benchmark scripts' stand-in for a checkpoint.

One builder for ``scripts/bench.py`` and ``scripts/gpu_check.py``, so both time the same kind of network and a
seed always gives the same weights (``tests/fixtures/speed_tokens.json`` pins the bench's real-vocabulary ones).
"""

from __future__ import annotations

from typing import Any

import torch

from .architectures import architecture_of
from .config import ModelConfig
from .moe import MoEConfig, MoEDiffusionLM, is_moe_config
from .network import DiffusionLM


def random_network(raw: dict[str, Any], name: str, device: torch.device, dtype: torch.dtype,
                   seed: int = 0) -> DiffusionLM:
    """``DiffusionLM`` (``MoEDiffusionLM`` for a LLaDA-MoE config, the architectures' network for Fast-dLLM v2, SDAR
    and LLaDA2) for the HF-style config ``raw``: matrices
    N(0, 0.02), norm weights 1, biases 0 (and expert biases 0).

    Built on ``device`` after ``torch.manual_seed(seed)``: the weights depend only on config, seed, device
    and dtype, and on the CPU on ATen's kernel width: float32 ``normal_`` draws other values under
    ``ATEN_CPU_CAPABILITY=default`` than under avx2/avx512 (docs/decoding.md, "The same decode on every CPU").
    """
    arch = architecture_of(raw)  # block diffusion and LLaDA2 networks, by their architectures
    moe = arch is None and is_moe_config(raw)
    if arch is not None:
        cfg, build = arch.parse(raw, name), arch.network
    else:
        cfg = (MoEConfig if moe else ModelConfig).from_hf_config(raw, name_or_path=name)
        build = MoEDiffusionLM if moe else DiffusionLM
    torch.manual_seed(seed)
    with torch.device(device):
        model = build(cfg).to(dtype)
    with torch.no_grad():
        for param_name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
            elif param_name.endswith("bias"):
                p.zero_()
            else:
                p.fill_(1.0)
    return model.eval()
