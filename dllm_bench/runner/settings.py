"""The runner's own config keys: the top level of conf/config.yaml and the `model` group, as dataclasses.

Together with the engine builders' parameters (policy, rule, cache) and the task's options they are every key
a run config may hold; `validate.check_keys` refuses any other before anything loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

GROUPS = ("model", "task", "cache", "rule", "policy")


@dataclass(frozen=True)
class RunSettings:
    """Top-level keys (conf/config.yaml documents each)."""

    name: str = "default"
    output_dir: str = "results"
    gen_length: int = 24
    block_length: int = 8
    batch_size: int = 8
    seed: int = 0
    temperature: float = 0.0
    cfg_scale: float = 0.0
    early_stop: bool = True
    trace: bool = False
    limit: int | None = None
    offset: int = 0
    warmup: int = 1
    timing_docs: int | None = None
    num_threads: int | None = None
    progress: bool = True
    count_rule: str = "cut"
    confidence_precision: str = "float64"
    confidence_mask_in_softmax: bool = True
    resume_changed: bool = False


@dataclass(frozen=True)
class ModelSettings:
    """Keys of the `model` group (conf/model/*.yaml)."""

    name_or_path: str
    flavour: str = "llada"
    chat: bool = False
    vision: bool = False
    forbidden_tokens: list[str] = field(default_factory=list)
    dtype: str | None = None
    device: str | None = None
    rope_full_precision: bool | None = None  # None = as the published model code (see load_model)


def setting_names(cls: type) -> tuple[str, ...]:
    """Field names of a settings dataclass in declaration order."""
    return tuple(f.name for f in fields(cls))
