"""The runner's own config keys: the top level of conf/config.yaml and the `model` group, as dataclasses.

Together with the engine builders' parameters (policy, rule, cache) and the task's options they are every key
a run config may hold; `validate.check_keys` refuses any other before anything loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from dllm_bench.runner.bounds import bounds, usable_cpus

GROUPS = ("model", "task", "cache", "rule", "policy")
# Document i decodes with seed + i: torch's generator takes seeds below 2**64, numpy's below 2**32 (seeded mod 2**32).
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class RunSettings:
    """Top-level keys (conf/config.yaml documents each); a numeric key declares its range (runner/bounds.py)."""

    name: str = "default"
    output_dir: str = "results"
    gen_length: int = field(default=24, metadata=bounds(1))  # and, with the prompt, within the model's positions
    block_length: int = field(default=8, metadata=bounds(1))
    batch_size: int = field(default=8, metadata=bounds(1))
    seed: int = field(default=0, metadata=bounds(0, MAX_SEED))
    temperature: float = field(default=0.0, metadata=bounds(0))
    cfg_scale: float = field(default=0.0, metadata=bounds(0))
    early_stop: bool = True
    trace: bool = False
    limit: int | None = field(default=None, metadata=bounds(0))
    offset: int = field(default=0, metadata=bounds(0))
    warmup: int = field(default=1, metadata=bounds(0))
    timing_docs: int | None = field(default=None, metadata=bounds(1))
    num_threads: int | None = field(default=None, metadata=bounds(1, usable_cpus, "the CPUs this process may use"))
    progress: bool = True
    count_rule: str = "cut"
    confidence_precision: str = "float64"
    confidence_mask_in_softmax: bool = True
    resume_changed: bool = False


@dataclass(frozen=True)
class ModelSettings:
    """Keys of the `model` group and their defaults, the one place they are written: each conf/model/*.yaml
    extends them (``- /defaults/model/settings@_here_``, runner/group_defaults) and sets only what differs."""

    name_or_path: str  # a hub id or a local folder
    flavour: str  # llada | dream (checked against config.json when the path is local)
    chat: bool = False  # prompts go through the chat template (instruct models, the tiny ones)
    vision: bool = False  # accepts images
    forbidden_tokens: tuple[str, ...] = ()  # never committed at masked positions (ids via the tokenizer)
    dtype: str | None = None  # None = bfloat16 on cuda, float32 on cpu
    device: str | None = None  # None = cuda if available else cpu; "per_job" = cuda:(hydra job number mod GPU count)
    # None = as the published model code (LLaDA: config.json's key; Dream: the model dtype); true = float32
    rope_full_precision: bool | None = None
    attention: str | None = None  # block diffusion's switches (models/blocks.py); None = the checkpoint's
    block_grid: str | None = None
    # the layer stack under torch.compile (models/compiled.py): false (eager) or a mode: default | reduce-overhead
    # | max-autotune
    compile: bool | str = False


BACKENDS = ("local", "sglang", "openai")
PROMPT_FORMS = ("ids", "text")


@dataclass(frozen=True)
class BackendSettings:
    """Keys of the optional `backend` group (conf/backend/*.yaml): who generates. `local` has only its name; a
    served backend (docs/backends.md) needs its URL."""

    name: str = "local"
    url: str | None = None
    model: str | None = None
    concurrency: int = field(default=8, metadata=bounds(1, 1024))
    timeout_s: float = field(default=600.0, metadata=bounds(0.001))
    retries: int = field(default=3, metadata=bounds(0, 100))
    backoff_s: float = field(default=1.0, metadata=bounds(0, 3600))
    prompt_as: str = "ids"


def setting_names(cls: type) -> tuple[str, ...]:
    """Field names of a settings dataclass in declaration order."""
    return tuple(f.name for f in fields(cls))
