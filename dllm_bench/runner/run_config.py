"""The typed run configuration: built once from the composed, validated Hydra config, then read by attribute.

`RunConfig` holds the top-level keys (`RunSettings`), the model (`ModelSettings`), the task and the three decoding
choices (`Choice`: a registered name and the keys beside it) and a served backend (`BackendSettings`, None for a
local run). It also keeps the config as composed (`as_dict`), which is what a run id digests and what run.json and
runs.csv record, so a config hashes as it did before the typed form existed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from dllm_bench.runner.settings import BackendSettings, ModelSettings, RunSettings, setting_names


def _frozen(values: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(copy.deepcopy(dict(values)))


@dataclass(frozen=True)
class Choice:
    """A chosen member of a config group (a task, policy, rule or cache): its name and its other keys, which are
    the builder's keyword arguments."""

    name: str
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, group: Mapping[str, Any]) -> Choice:
        """The choice of a group's node (`{"name": ..., key: value, ...}`)."""
        return cls(str(group.get("name")), _frozen({k: v for k, v in group.items() if k != "name"}))

    def as_dict(self) -> dict[str, Any]:
        """The group's node as composed: `name` and the other keys."""
        return {"name": self.name, **copy.deepcopy(dict(self.params))}


@dataclass(frozen=True, kw_only=True)
class RunConfig(RunSettings):
    """One run's configuration (docs/runner.md, "Config schema"); frozen, so every reader sees the same values."""

    model: ModelSettings
    task: Choice
    policy: Choice
    rule: Choice
    cache: Choice
    backend: BackendSettings | None = None  # None: decoded in this process (backend=local)
    composed: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    fingerprint: str | None = None  # the checkpoint's digest, set once the cheap refusals passed (execute)

    @classmethod
    def from_dict(cls, c: Mapping[str, Any]) -> RunConfig:
        """The typed form of a resolved plain config whose keys and types `validate.check_keys` accepted; a
        `backend=local` node is dropped (a local run's config, id and rows as before the backend group existed)."""
        c = dict(c)
        if (c.get("backend") or {}).get("name", "local") == "local":
            c.pop("backend", None)
        model = dict(c["model"])
        fingerprint = model.pop("fingerprint", None)
        model["forbidden_tokens"] = tuple(model.get("forbidden_tokens") or ())
        top = {name: c[name] for name in setting_names(RunSettings) if name in c}
        backend = c.get("backend")
        return cls(**top, model=ModelSettings(**model), task=Choice.of(c["task"]), policy=Choice.of(c["policy"]),
                   rule=Choice.of(c["rule"]), cache=Choice.of(c["cache"]),
                   backend=None if backend is None else BackendSettings(**backend),
                   composed=_frozen({**c, "model": {k: v for k, v in c["model"].items() if k != "fingerprint"}}),
                   fingerprint=fingerprint)

    def as_dict(self) -> dict[str, Any]:
        """The config as composed, a fresh plain dict (`model.fingerprint` added once known): what the run id
        digests and run.json and runs.csv record."""
        data = copy.deepcopy(dict(self.composed))
        if self.fingerprint is not None:
            data["model"] = {**data["model"], "fingerprint": self.fingerprint}
        return data

    def with_fingerprint(self, fingerprint: str | None) -> RunConfig:
        return replace(self, fingerprint=fingerprint)

    @property
    def scoring(self) -> str:
        """The task's scoring mode: `lm_eval` (the default) or `paper`."""
        return str(self.task.params.get("scoring", "lm_eval"))

    @property
    def served(self) -> bool:
        """Whether a server generates (a `backend` other than local)."""
        return self.backend is not None

    def choices(self) -> str:
        """`policy/rule/cache` of the run, as its progress bar names it."""
        return f"{self.policy.name}/{self.rule.name}/{self.cache.name}"
