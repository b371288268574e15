"""The speed work changed no decision: tokens and NFE equal the values recorded before it
(``tests/fixtures/speed_tokens.json``, written by ``tests/decoding/speed_reference.py`` on the earlier engine):
``first100``/``all500``/``vocab`` before the first speed round, ``current``/``current_vocab`` before the second
(its dLLM-Cache entries again after issue 31's V-verify ranking). The same digests under every ATEN_CPU_CAPABILITY
(``make test-cpu-capabilities``). By default the ``current`` entries that cover each rule once, and each cache and
each loop once per checkpoint (published_goldens.covering_settings), each decoded alone; ``-m exhaustive`` every
entry."""

from __future__ import annotations

import json
from functools import cache

import pytest
import torch

from . import speed_reference as ref
from .published_goldens import covering_settings

RECORDED = json.loads(ref.FIXTURE.read_text())


def _policy(entry: dict) -> str:
    """The decoding loop of a ``current`` entry (speed_reference's settings)."""
    return {**ref.RULES, **ref.DREAM_ALGS}.get(entry["name"], ("blocks",))[0]


CURRENT = [dict(zip(("flavour", "name", "cache"), k.split("/")[1:], strict=True)) for k in sorted(RECORDED)
           if k.startswith("current/")]
DEFAULT_KEYS = {"current/{flavour}/{name}/{cache}".format(**CURRENT[i]) for i in covering_settings(
    CURRENT, lambda s: {"rule": s["name"], "cache": (s["flavour"], s["cache"]), "policy": (s["flavour"], _policy(s))})}


@cache
def _tiny(flavour: str, limit: int | None, current: bool, key: str) -> dict:
    with torch.no_grad():
        return ref.tiny_runs(flavour, limit, current=current, only={key})


def _tiny_case(key: str):
    # make test: today's engine on 100 puzzles (``current``), the entries covering each rule and cache; the earlier
    # confidence rule's 100 (``first100``) are the first fifth of its 500 (``all500``), replayed with the other
    # ``current`` entries under -m exhaustive
    return pytest.param(key, marks=[] if key in DEFAULT_KEYS else [pytest.mark.exhaustive], id=key)


@pytest.mark.parametrize("key", [_tiny_case(k) for k in sorted(RECORDED) if "vocab/" not in k])
def test_tiny_checkpoints_decode_as_recorded(key):
    tag, flavour, name, cache = key.split("/")
    setting = f"{flavour}/{name}/{cache}"
    got = _tiny(flavour, None if tag == "all500" else 100, tag == "current", setting)[setting]
    assert got == RECORDED[key]


@pytest.mark.exhaustive
@pytest.mark.parametrize("current", [False, True], ids=["vocab", "current_vocab"])
def test_real_vocabulary_shape_decodes_as_recorded(current):
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("the bench's random weights are float32 normal_ draws, which ATen's default kernels draw "
                    "differently from its avx2/avx512 ones; the fixture holds the avx2/avx512 weights")
    with torch.no_grad():
        got = ref.vocab_runs(current=current)
    tag = "current_vocab/" if current else "vocab/"
    assert got == {k: v for k, v in RECORDED.items() if k.startswith(tag)}
