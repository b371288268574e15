"""Caches as one file each: the registry, the declared protocol, strict parameters, a YAML per cache,
and a session's plan covering every active row exactly once, step after step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from dllm_bench.decoding.caches import (
    CACHES,
    Cache,
    CacheSession,
    Canvas,
    HostView,
    StepRows,
    build_cache,
)

ROOT = Path(__file__).resolve().parents[2]
CACHE_YAMLS = ROOT / "conf" / "cache"


def _preset_files() -> list[Path]:
    return sorted(CACHE_YAMLS.glob("*.yaml"))


def test_every_cache_has_its_yaml_and_every_yaml_names_a_cache():
    assert {p.stem for p in _preset_files()} >= set(CACHES)
    for path in _preset_files():
        assert yaml.safe_load(path.read_text())["name"] in CACHES, path


@pytest.mark.parametrize("name", sorted(CACHES))
def test_cache_declares_the_protocol(name):
    cache = build_cache(name)
    assert isinstance(cache, Cache) and cache.name == name
    assert isinstance(cache.stateless, bool) and isinstance(cache.shorter_canvas, bool)
    assert set(cache.flavours) <= {"llada", "dream"}
    assert isinstance(cache.force_first, bool) and set(cache.stores) <= {"k", "v", "attn", "ffn"}
    assert isinstance(cache.holds_full_blocks, bool)
    assert isinstance(cache.session(_canvas()), CacheSession)


def test_parameters_are_strict():
    with pytest.raises(ValueError, match=r"^cache 'paged' is not one of"):
        build_cache("paged")
    with pytest.raises(ValueError, match=r"^cache 'dual': unknown parameter every=4; allowed: refresh_every"):
        build_cache("dual", every=4)
    with pytest.raises(ValueError, match=r"^cache 'dllm': parameter verify_ratio='0.2' must be float$"):
        build_cache("dllm", verify_ratio="0.2")
    with pytest.raises(ValueError, match=r"^cache 'prefix': parameter refresh_every=True must be int or None$"):
        build_cache("prefix", refresh_every=True)
    assert build_cache("dllm", verify_ratio=1).verify_ratio == 1.0  # an int is a float


def _canvas(batch: int = 4, prompt: int = 5, answer: int = 8) -> Canvas:
    return Canvas(prompt, prompt + answer, torch.full((batch,), prompt), 0, 99)


STEPS = [  # (active rows, block_lo, block_hi): rows leave, move to the next block at different steps
    ([0, 1, 2, 3], [0, 0, 0, 0], [4, 4, 4, 4]),
    ([0, 1, 2, 3], [0, 4, 0, 4], [4, 8, 4, 8]),
    ([0, 2, 3], [4, 4, 0, 4], [8, 8, 4, 8]),
    ([2], [4, 4, 4, 4], [8, 8, 8, 8]),
]


PLANS_FROM_FORWARDS = {"d2cache": "its plan reads the last forward's rollout (tests/decoding/test_d2cache.py decodes "
                                  "a batch whose rows leave at different steps)",
                       "elastic": "its plan reads the last forward's drift and most-attended tokens, and a row whose "
                                  "drift test fires is in a second forward (tests/decoding/test_elastic_cache.py)"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.skip(reason=PLANS_FROM_FORWARDS[n]))
                                  if n in PLANS_FROM_FORWARDS else n for n in sorted(CACHES)])
def test_a_plan_covers_every_active_row_once(name):
    session = build_cache(name).session(_canvas())
    ids = torch.zeros(4, 13, dtype=torch.long)
    for rows, lo, hi in STEPS:
        step_rows = StepRows(rows, torch.tensor(rows))
        # each row's block start is the step's one commit, known before the forward (rule random_order)
        commits = torch.full((4, 8), float("-inf")).scatter_(1, torch.tensor(lo).unsqueeze(1), 1.0)
        view = HostView(rows, lo, hi, None, [8] * 4, planned=commits)
        covered = [r for f in session.forwards(view, step_rows, ids) for r in f.rows.tolist()]
        assert sorted(covered) == rows
