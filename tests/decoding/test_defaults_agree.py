"""One source of defaults: the builders' dataclasses (and a policy's ``presets``); every conf/cache and conf/policy
file must say exactly what they say, so `build_cache("dllm")` and `cache=dllm` decode alike."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest
import yaml

from dllm_bench.decoding.config import CACHES, POLICY_CLASSES
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
    if path.parent.name == "policy" and (path.stem != name or cls.default_preset):
        preset = preset_of(path, name) or cls.default_preset
        assert preset in cls.presets, f"{path.name}: {preset!r} is not one of policy {name}'s presets"
        expected.update(cls.presets[preset])
    assert data == expected


def preset_of(path, name: str) -> str | None:
    """The preset a conf/policy file carries: ``<policy>_<preset>.yaml`` or ``<preset>.yaml``; None for ``<policy>.yaml``."""
    return None if path.stem == name else path.stem.removeprefix(f"{name}_")


@pytest.mark.parametrize("name", sorted(n for n, cls in POLICY_CLASSES.items() if cls.presets))
def test_every_preset_has_its_file(name):
    files = [p for p in (CONF_DIR / "policy").glob("*.yaml") if yaml.safe_load(p.read_text())["name"] == name]
    assert {preset_of(p, name) for p in files} - {None} == set(POLICY_CLASSES[name].presets)
