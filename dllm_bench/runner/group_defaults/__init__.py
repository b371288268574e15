"""The rule, cache, policy and model groups' defaults as Hydra config nodes, built from the dataclasses, the
one place they are written: ``defaults/<kind>/<name>`` holds ``name`` and every parameter at its default (a
policy's ``default_preset`` applied), ``defaults/policy/<policy>_<preset>`` a policy's preset over them, and
``defaults/model/settings`` every model key (runner.settings.ModelSettings). Each conf/{rule,cache,policy,model}
file extends one (``- /defaults/rule/threshold@_here_``) and sets only what differs.

A package, not a module: conf/config.yaml names it in ``hydra.searchpath`` (``pkg://``, holding no files), so
Hydra imports it whenever it composes conf/ or a copy of it: the CLI, ``dllm_bench.api``, the lm-eval adapter,
the report, tests and scripts alike. ``store_group_defaults`` stores again what was registered since.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from dllm_bench.decoding.caches import CACHES
from dllm_bench.decoding.policies import POLICIES
from dllm_bench.decoding.rules import RULES
from dllm_bench.runner.settings import ModelSettings

GROUP = "defaults"
REGISTRIES: Mapping[str, Mapping[str, type]] = {"rule": RULES, "cache": CACHES, "policy": POLICIES}


def config_defaults(cls: type) -> dict[str, Any]:
    """A registered dataclass's parameters at their defaults, as config values: a required parameter is null
    (its builder refuses it, naming it), a float parameter's integer default a float (as the builder reads it)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in fields(cls):
        if not f.init:
            continue
        value = f.default if f.default is not MISSING else None
        if f.default_factory is not MISSING:
            value = f.default_factory()
        if isinstance(value, tuple):
            value = list(value)  # a config list
        out[f.name] = float(value) if hints[f.name] is float and type(value) is int else value
    return out


def group_nodes() -> dict[str, dict[str, Any]]:
    """``<kind>/<option>`` -> ``{name, parameters}`` for every registered rule, cache, policy and policy preset;
    ``model/settings`` -> every model key at its default."""
    nodes: dict[str, dict[str, Any]] = {"model/settings": config_defaults(ModelSettings)}
    for kind, registry in REGISTRIES.items():
        for name, cls in registry.items():
            values = {"name": name, **config_defaults(cls)}
            presets: Mapping[str, Mapping[str, Any]] = getattr(cls, "presets", {})
            default_preset = getattr(cls, "default_preset", None)
            nodes[f"{kind}/{name}"] = {**values, **presets.get(default_preset, {})}
            for preset, changes in presets.items():
                if f"{name}_{preset}" in registry:
                    raise TypeError(f"{kind} {name!r} preset {preset!r}: {name}_{preset} is a {kind} of its own")
                nodes[f"{kind}/{name}_{preset}"] = {**values, **changes}
    return nodes


def option_values(path: Path) -> dict[str, Any]:
    """A conf option's keys as Hydra composes its group, read without Hydra: the node its defaults list extends
    (``- /defaults/<kind>/<name>@_here_``), then the file's own keys; any other file is its own keys."""
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert isinstance(data, dict), path
    values: dict[str, Any] = {}
    for entry in data.pop("defaults", None) or []:
        if isinstance(entry, str) and entry.startswith(f"/{GROUP}/") and entry.endswith("@_here_"):
            values.update(group_nodes()[entry[len(GROUP) + 2:-len("@_here_")]])
    return {**values, **data}


def store_group_defaults() -> None:
    """Store every node under ``defaults/`` in Hydra's ConfigStore (again: a later registration is added)."""
    store = ConfigStore.instance()
    for path, node in group_nodes().items():
        kind, name = path.split("/")
        store.store(group=f"{GROUP}/{kind}", name=name, node=node, provider="dllm_bench")


store_group_defaults()
