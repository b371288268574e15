"""What is and is not the same under every SIMD width ATen's CPU kernels can use (ATEN_CPU_CAPABILITY: default,
avx2, avx512; issue 31), measured in one child process per capability this CPU has.

The same bits everywhere: dLLM-Cache V-verify's row choice (``least_similar_rows``), ``Linear`` and ``F.linear``
(MKL's GEMM picks its own kernels; ATEN_CPU_CAPABILITY does not reach it), the float64 confidence and its token
choice at a 126k vocabulary (``exp`` is MKL's; the float64 sum came out the same), ``torch.rand``. Not the same
bits: the network's logits (RMSNorm, attention and softmax are ATen kernels of each width), equal to 1e-4, so a
golden decode holds on every CPU only where no choice sits inside that margin (``make test-cpu-capabilities`` runs
the goldens under each capability); float32 ``randn``/``normal_`` of 16+ values (an AVX2 Box-Muller under avx2 and
avx512, a scalar one under default), so the inputs here are drawn in float64."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "dllm_bench" / "tiny" / "checkpoints"


def cpu_capabilities() -> list[str]:
    """The ATEN_CPU_CAPABILITY values this CPU can run: default, and avx2 / avx512 where /proc/cpuinfo has the
    flags (the same test as the Makefile's test-cpu-capabilities)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return ["default"]
    return ["default"] + [cap for cap, flag in (("avx2", "avx2"), ("avx512", "avx512f")) if flag in flags]


def _sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


def probe() -> dict:
    """Everything compared across capabilities, computed in this process (fixed seeds)."""
    import torch.nn.functional as F

    from dllm_bench.decoding.confidence import candidate_predictions
    from dllm_bench.models import cpu_linear, load_model
    from dllm_bench.models.cache import least_similar_rows

    g = torch.Generator().manual_seed(7)

    def randn(*shape: int) -> torch.Tensor:  # float32 randn itself differs under default (its AVX2 Box-Muller)
        return torch.randn(shape, generator=g, dtype=torch.float64).float()

    # V-verify: a third of the rows unchanged, a third moved by an ulp or so, the rest moved a little
    cached = randn(8, 48, 256)
    kind = torch.randint(0, 3, (8, 48, 1), generator=g)
    ulp = cached * torch.randint(-2, 3, cached.shape, generator=g) * 2.0**-23
    new = torch.where(kind == 1, cached + ulp, torch.where(kind == 2, cached + 0.05 * randn(*cached.shape), cached))
    published = torch.topk(F.cosine_similarity(new, cached, dim=-1), 12, dim=-1, largest=False).indices.sort(-1).values
    # Linear at 12-64 rows (LM-head-sized weight in tiles) and F.linear
    layer = cpu_linear.Linear(512, 9000, bias=True)
    with torch.no_grad():
        layer.weight.copy_(randn(9000, 512) * 0.05)
        layer.bias.copy_(randn(9000))
        x = randn(64, 512)
        linear = [_sha(layer(x[:rows])) for rows in (12, 16, 31, 64)]
        f_linear = _sha(F.linear(x, layer.weight, layer.bias))
    # the float64 confidence on LM-head-sized logits
    logits = randn(16, 126464) * 4
    x0, conf = candidate_predictions(logits, [16], unchosen_token_ids=[126336])
    # the tiny checkpoint's logits
    model = load_model(CHECKPOINTS / "tiny_llada", device="cpu", dtype="float32")
    ids = torch.randint(0, model.config.vocab_size - 4, (4, 40), generator=g)
    with torch.no_grad():
        net = model(ids)
    return {"capability": torch.backends.cpu.get_cpu_capability().lower(),
            "ours": least_similar_rows(new, cached, 12).tolist(), "published": published.tolist(),
            "linear": linear, "f_linear": f_linear, "x0": x0.tolist(), "confidence": conf.tolist(),
            "logits": net.flatten().tolist(), "rand": _sha(torch.rand(64, generator=torch.Generator().manual_seed(0)))}


@cache
def runs() -> dict[str, dict]:
    out = {}
    for cap in cpu_capabilities():
        env = {**os.environ, "ATEN_CPU_CAPABILITY": cap,
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        code = "import json, tests.test_cpu_capabilities as t; print(json.dumps(t.probe()))"
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
        out[cap] = json.loads(done.stdout)
    return out


pytestmark = pytest.mark.skipif(sys.platform != "linux" or os.uname().machine not in ("x86_64", "AMD64"),
                                reason="ATEN_CPU_CAPABILITY values of x86")


def test_each_child_runs_the_capability_it_was_given():
    assert {cap: run["capability"] for cap, run in runs().items()} == {cap: cap for cap in runs()}


def test_verify_rows_linear_and_the_confidence_are_the_same_bits():
    first, *others = runs().values()
    for run in others:
        for key in ("ours", "linear", "f_linear", "x0", "confidence", "rand"):
            assert run[key] == first[key], key


def test_the_logits_agree_to_their_margin():
    """Up to 4.0e-5 apart on this CPU (logits of magnitude up to about 20)."""
    first, *others = runs().values()
    for run in others:
        assert torch.allclose(torch.tensor(run["logits"]), torch.tensor(first["logits"]), rtol=0, atol=1e-4)
