"""One source of defaults: every conf/{rule,cache,policy,model} option composes to its dataclass's defaults (a
policy file's preset, a cache preset file's own values over them), and no file restates a default; Hydra takes
them from the dataclasses (runner/group_defaults), so `build_cache("dllm")` and `cache=dllm` decode alike."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from dllm_bench.decoding.config import CACHES, POLICY_CLASSES, RULES
from dllm_bench.runner.config import CONF_DIR
from dllm_bench.runner.group_defaults import option_values
from dllm_bench.runner.settings import ModelSettings

pytestmark = pytest.mark.fast  # the inner loop: make test-fast

REGISTRIES = {"rule": RULES, "cache": CACHES, "policy": POLICY_CLASSES}
FILES = sorted(p for group in REGISTRIES for p in (CONF_DIR / group).glob("*.yaml"))


def dataclass_defaults(cls) -> dict:
    """Init fields and defaults in declaration order; a required field (no default) is null ("required")."""
    return {f.name: None if f.default is MISSING else f.default for f in fields(cls) if f.init}


def preset_of(path, name: str) -> str | None:
    """The preset a conf/policy file carries: ``<policy>_<preset>.yaml`` or ``<preset>.yaml``; None for ``<policy>.yaml``."""
    return None if path.stem == name else path.stem.removeprefix(f"{name}_")


def own_values(path) -> dict:
    """What the file itself sets (its defaults list aside)."""
    data = yaml.safe_load(path.read_text())
    data.pop("defaults", None)
    return data


@pytest.fixture(scope="module")
def composed_group():
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        yield lambda group, option: OmegaConf.to_container(compose("config", overrides=[f"{group}={option}"])[group])


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_the_option_composes_to_the_dataclass_defaults_and_restates_none(path, composed_group):
    group, own = path.parent.name, own_values(path)
    name = own.pop("name")
    composed = composed_group(group, path.stem)
    assert option_values(path) == composed  # what the bench, the method tables and the combinations read
    if group == "rule" and name == "none":  # the policy's own rule: no rule object, no parameters
        assert composed == {"name": "none"} and own == {}
        return
    cls = REGISTRIES[group][name]
    expected = {"name": name, **dataclass_defaults(cls)}
    if group == "policy" and (path.stem != name or cls.default_preset):
        preset = preset_of(path, name) or cls.default_preset
        assert preset in cls.presets, f"{path.name}: {preset!r} is not one of policy {name}'s presets"
        expected.update(cls.presets[preset])
    for key, value in own.items():  # only what differs: a cache preset's own values
        assert key in expected and expected[key] != value, f"{path}: {key}={value!r} restates a default or is no key"
    expected.update(own)
    assert composed == expected and list(composed) == list(expected)  # values, and keys in declaration order


@pytest.mark.parametrize("name", sorted(n for n, cls in POLICY_CLASSES.items() if cls.presets))
def test_every_preset_has_its_file(name):
    files = [p for p in (CONF_DIR / "policy").glob("*.yaml") if yaml.safe_load(p.read_text())["name"] == name]
    assert {preset_of(p, name) for p in files} - {None} == set(POLICY_CLASSES[name].presets)


MODEL_FILES = sorted((CONF_DIR / "model").glob("*.yaml"))


@pytest.mark.parametrize("path", MODEL_FILES, ids=[p.stem for p in MODEL_FILES])
def test_a_model_file_sets_its_checkpoint_and_only_what_differs(path, composed_group):
    own, composed = own_values(path), composed_group("model", path.stem)
    required = [f.name for f in fields(ModelSettings) if f.default is MISSING]
    assert required == ["name_or_path", "flavour"] and all(own.get(k) for k in required), path
    expected = {f.name: None if f.default is MISSING else f.default for f in fields(ModelSettings)}
    for key, value in own.items():
        assert key in expected and (key in required or expected[key] != value), \
            f"{path}: {key}={value!r} restates a default or is no key"
    expected = {**expected, **own, "forbidden_tokens": list(own.get("forbidden_tokens", ()))}
    composed["name_or_path"] = own["name_or_path"]  # ${pkg_path:...} resolved
    assert option_values(path) | {"name_or_path": own["name_or_path"]} == composed
    assert composed == expected and list(composed) == list(expected)
