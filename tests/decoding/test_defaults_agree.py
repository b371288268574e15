"""One source of defaults: the builders' dataclasses (and SLOWFAST_PRESETS, block_diffusion's PRESETS); every conf/cache and conf/policy
file must say exactly what they say, so `build_cache("dllm")` and `cache=dllm` decode alike."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest
import yaml

from dllm_bench.decoding.config import CACHES, POLICY_CLASSES
from dllm_bench.decoding.policies import EDIT_PRESETS, SLOWFAST_PRESETS, SOFT_PRESETS
from dllm_bench.decoding.policies.block_diffusion import PRESETS as BLOCK_DIFFUSION_PRESETS
from dllm_bench.decoding.policies.pipeline import PIPELINE_PRESETS
from dllm_bench.runner.config import CONF_DIR

pytestmark = pytest.mark.fast  # the inner loop: make test-fast

FILES = sorted([*(CONF_DIR / "cache").glob("*.yaml"), *(CONF_DIR / "policy").glob("*.yaml")])


def dataclass_defaults(cls) -> dict:
    """Init fields and defaults; a required field (no default) is null in the YAML ("required")."""
    return {f.name: None if f.default is MISSING else f.default for f in fields(cls) if f.init}


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_yaml_equals_the_dataclass_defaults(path):
    data = yaml.safe_load(path.read_text())
    data.pop("defaults", None)
    name = data.pop("name")
    cls = (CACHES if path.parent.name == "cache" else POLICY_CLASSES)[name]
    expected = dataclass_defaults(cls)
    if path.parent.name == "cache" and path.stem != name:  # a preset: its own values over the defaults
        expected.update({k: v for k, v in data.items() if k in expected})
    if name == "slowfast":
        expected.update(SLOWFAST_PRESETS[path.stem.removeprefix("slowfast_")])
    if name == "block_diffusion" and path.stem != name:
        expected.update(BLOCK_DIFFUSION_PRESETS[path.stem])
    if name == "llada21":
        expected.update(EDIT_PRESETS[path.stem.removeprefix("llada21_")])
    if name == "dmax":
        expected.update(SOFT_PRESETS[path.stem.removeprefix("dmax_")])
    if name == "pipeline":
        expected.update(PIPELINE_PRESETS[path.stem.removeprefix("pipeline_")])
    assert data == expected


def test_every_pipeline_preset_has_its_file():
    assert sorted(p.stem for p in (CONF_DIR / "policy").glob("pipeline_*.yaml")) == \
        sorted(f"pipeline_{name}" for name in PIPELINE_PRESETS)


def test_every_slowfast_preset_has_its_file():
    assert sorted(p.stem for p in (CONF_DIR / "policy").glob("slowfast_*.yaml")) == \
        sorted(f"slowfast_{name}" for name in SLOWFAST_PRESETS)


def test_every_block_diffusion_preset_has_its_file():
    named = {p.stem for p in (CONF_DIR / "policy").glob("*.yaml")
             if yaml.safe_load(p.read_text())["name"] == "block_diffusion"}
    assert named == {"block_diffusion", *BLOCK_DIFFUSION_PRESETS}


def test_every_llada21_preset_has_its_file():
    assert sorted(p.stem for p in (CONF_DIR / "policy").glob("llada21_*.yaml")) == \
        sorted(f"llada21_{name}" for name in EDIT_PRESETS)


def test_every_dmax_preset_has_its_file():
    assert sorted(p.stem for p in (CONF_DIR / "policy").glob("dmax_*.yaml")) == \
        sorted(f"dmax_{name}" for name in SOFT_PRESETS)
