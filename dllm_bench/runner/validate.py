"""Validate a composed run config before any weights or data are read; errors name key, value and choices.

Every key is checked against what the code consumes (`check_keys`); the decoding groups' values are checked
once, by the engine's builders and the run's `DecodeSpec` (`build_spec`), whose errors become ConfigErrors here.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from dllm_bench.decoding.config import CACHES, POLICIES, POLICY_CLASSES, RULES, builder_parameters
from dllm_bench.models.blocks import ATTENTIONS, BLOCK_GRIDS
from dllm_bench.models.compiled import COMPILE_MODES, cpu_compiler_missing
from dllm_bench.models.config import MODEL_TYPES, ModelConfigError
from dllm_bench.models.loading import parse_config
from dllm_bench.models.lora import AdapterError, checkpoint_of, is_adapter_dir
from dllm_bench.runner.bounds import DECODING_BOUNDS, field_bounds, non_finite, out_of_bounds
from dllm_bench.runner.components import NO_RULE, build_spec
from dllm_bench.runner.config import to_container
from dllm_bench.runner.errors import ConfigError
from dllm_bench.runner.paths import check_output_location
from dllm_bench.runner.positions import check_answer_fits, model_positions
from dllm_bench.runner.renames import refusal, renamed_key
from dllm_bench.runner.run_config import RunConfig
from dllm_bench.runner.settings import (
    BACKENDS,
    GROUPS,
    PROMPT_FORMS,
    BackendSettings,
    ModelSettings,
    RunSettings,
    setting_names,
)
from dllm_bench.tasks import TASKS, Task, TaskConfig, get_task
from dllm_bench.tracking import tracking_settings

FLAVOURS = ("llada", "dream")
DTYPES = (None, "float32", "bfloat16", "float16")
COUNT_RULES = ("cut", "nonstop", "canvas", "all")
PRECISIONS = ("float64", "float32", "bfloat16", "float16", "model")
# (config group, builder kind, the registry of names the builder knows: read at each check, so a method
# registered after this import is known too)
DECODING_GROUPS = (("policy", "policy", POLICIES), ("rule", "rule", RULES), ("cache", "cache", CACHES))
DATA_KEYS = ("data_files", "data_file", "data_dir", "data_path")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
RENAMED = {"selector": "rule"}  # keys of earlier releases -> the group that replaced them
UNEXPECTED_ARGUMENT = re.compile(r"unexpected keyword argument '(\w+)'")
DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+|mps|per_job)$")


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def _choice(key: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if value not in choices:
        _fail(key, value, "choose one of " + ", ".join(repr(c) for c in choices))


def _unknown(prefix: str, where: str, values: dict[str, Any], allowed: Iterable[str]) -> None:
    allowed = sorted(allowed)
    group, option = prefix.rstrip("."), values.get("name")
    for key in sorted(values):
        renamed = renamed_key(group, str(option), key)
        if renamed is not None and key not in allowed:
            raise ConfigError(refusal(renamed, values[key]))
        if key not in allowed:
            renamed = f" ({key} is now {RENAMED[key]}: {RENAMED[key]}={values[key]})" if key in RENAMED else ""
            _fail(f"{prefix}{key}", values[key], f"unknown key {where}{renamed}; allowed: {', '.join(allowed)}")


# A field's annotation -> (check, what the message asks for); other annotations (lists) are checked elsewhere.
_TYPES = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
}


def _check_types(prefix: str, values: dict[str, Any], cls: type) -> None:
    """Each value against its dataclass field's annotation (`int`, `float | None`, ...) and declared range
    (runner/bounds.py): a number where a word was typed, or one outside its meaning, is refused here, naming the
    key, rather than deep inside a builder."""
    declared = {**field_bounds(cls), **DECODING_BOUNDS.get((prefix.rstrip("."), cls.__name__), {})}
    for f in fields(cls):
        if f.name not in values or not isinstance(f.type, str):
            continue
        parts = [p.strip() for p in f.type.split("|")]
        optional = "None" in parts
        kinds = [_TYPES[p] for p in parts if p in _TYPES]
        if len(kinds) + optional != len(parts):
            continue
        value = values[f.name]
        required = f.default is MISSING and f.default_factory is MISSING
        if (value is None and (optional or required)) or any(check(value) for check, _ in kinds):
            allowed = out_of_bounds(value, declared[f.name], "int" in parts) if f.name in declared else None
            if allowed is not None:
                _fail(f"{prefix}{f.name}", value, f"{allowed}{' or null' if optional else ''} is required")
            continue  # a required value left null: the builder says what it needs it for
        wanted = " or ".join([what for _, what in kinds] + (["null"] if optional else []))
        _fail(f"{prefix}{f.name}", value, f"{wanted} is required")


def check_finite(c: dict[str, Any]) -> None:
    """No key means NaN or an infinity: the first such value anywhere in the config is refused, naming its key."""
    for key, value in non_finite(c):
        _fail(key, value, "a finite number is required")


def _decoding_class(kind: str, name: str) -> type:
    return {"rule": RULES, "policy": POLICY_CLASSES, "cache": CACHES}[kind][name]


def check_keys(c: dict[str, Any]) -> None:
    """Refuse any key the code does not consume and any value of the wrong type: top level, model and the
    decoding groups' builders (the task's keys are checked by `build_task`); no number anywhere may be NaN or
    infinite, and the top-level keys keep to their declared ranges."""
    _unknown("", "at the top level", c, (*setting_names(RunSettings), *GROUPS, "backend"))
    check_finite(c)
    for group in GROUPS:
        if not isinstance(c.get(group), dict):
            _fail(group, c.get(group), f"the config group {group!r} must be selected (see conf/{group}/)")
    _unknown("model.", "in group 'model'", c["model"], setting_names(ModelSettings))
    _check_types("model.", c["model"], ModelSettings)
    for group, kind, names in DECODING_GROUPS:
        name = c[group].get("name")
        _choice(f"{group}.name", name, (*names, NO_RULE) if group == "rule" else names)
        _unknown(f"{group}.", f"for {group} {name!r}", c[group], ("name", *(builder_parameters(kind, name) or ())))
        if name != NO_RULE or group != "rule":
            _check_types(f"{group}.", c[group], _decoding_class(kind, name))
    _check_types("", c, RunSettings)
    check_backend(c)


def check_backend(c: dict[str, Any]) -> None:
    """The optional `backend` group: a known name; a served one with an http(s) URL; `local` with nothing else."""
    backend = c.get("backend")
    if backend is None:
        return
    if not isinstance(backend, dict):
        _fail("backend", backend, "the config group 'backend' must be selected (see conf/backend/)")
    name = backend.get("name")
    _choice("backend.name", name, BACKENDS)
    allowed = ("name",) if name == "local" else setting_names(BackendSettings)
    _unknown("backend.", f"for backend {name!r}", backend, allowed)
    _check_types("backend.", backend, BackendSettings)
    if name == "local":
        return
    url = backend.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
        _fail("backend.url", url, f"backend {name!r} needs the server's base URL, http://host:port")
    _choice("backend.prompt_as", backend.get("prompt_as", "ids"), PROMPT_FORMS)
    if c["rule"]["name"] == "oracle":
        _fail("rule.name", "oracle", "the oracle decodes a reference in this process; use backend=local")
    if c.get("timing_docs") is not None:
        _fail("timing_docs", c["timing_docs"], "a served backend times requests at its concurrency; set "
                                               "timing_docs=null")


def check_decoding(run: RunConfig) -> None:
    """The engine's builders and the run's `DecodeSpec` judge the policy, rule and cache values and their pairing."""
    try:
        build_spec(run)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"policy={run.policy.name}, rule={run.rule.name}, cache={run.cache.name}: {err}") from None


def policy_flavours(policy: str) -> tuple[str, ...]:
    """The model flavours a policy runs on, as it declares them (``flavours``; every flavour for an unknown name,
    which its own check refuses)."""
    cls = POLICIES.get(policy)
    return tuple(cls.flavours) if cls is not None and cls.flavours else FLAVOURS


def _validate_combination(run: RunConfig, task: Task) -> None:
    policy, flavour = run.policy.name, run.model.flavour
    flavours = policy_flavours(policy)
    if flavour not in flavours:
        _fail("model.flavour", flavour, f"policy {policy!r} runs on {', '.join(flavours)} models only")
    try:
        CACHES[run.cache.name].check_flavour(flavour, policy)
    except ValueError as err:
        _fail("model.flavour", flavour, str(err))
    if task.needs_images and run.backend is not None:
        _fail("backend.name", run.backend.name, f"task {run.task.name!r} needs images; served backends take text")
    if task.needs_images and not run.model.vision:
        _fail("task.name", run.task.name,
              f"needs images, but model {run.model.name_or_path!r} is text-only (model.vision=false); "
              "use a vision model such as model=llada_v")


def _readable_file(key: str, path: str) -> None:
    p = Path(path)
    if not p.exists() or not os.access(p, os.R_OK):
        _fail(key, path, "must be a readable file or directory")
    if key == "task.data_dir" and not p.is_dir():
        _fail(key, path, f"a folder is required (it is a file: give one file as task.data_files={path})")
    if key == "task.data_files" and p.is_dir():
        _fail(key, path, f"one data file is required (it is a folder: give a folder as task.data_dir={path})")


def _check_device(device: Any) -> None:
    """The device must exist on this machine (a CUDA run on a CPU-only machine fails here, not at its first copy)."""
    if device is None:
        return
    if not DEVICE.match(str(device)):
        _fail("model.device", device, "null, cpu, cuda, cuda:N, mps or per_job")
    if str(device).startswith(("cuda", "per_job")):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.split(":")[1]) if ":" in str(device) else 0
        if index >= count:
            visible = f"{count} CUDA device(s) visible (cuda:0..cuda:{count - 1})" if count else "no CUDA device visible"
            _fail("model.device", device, f"{visible}; use cpu or null (null = CUDA when present, else cpu)")
    if device == "mps" and not torch.backends.mps.is_available():
        _fail("model.device", device, "MPS is not available on this machine; use cpu or null")


def _check_compile(model: dict[str, Any]) -> None:
    """model.compile: false or a torch.compile mode; on the CPU inductor needs a C++ compiler."""
    mode = model.get("compile", False)
    _choice("model.compile", mode, (False, *COMPILE_MODES))
    device = str(model.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))
    if mode is not False and device == "cpu" and (why := cpu_compiler_missing()) is not None:
        _fail("model.compile", mode, f"false on this machine ({why})")


def _validate_model(model: dict[str, Any]) -> None:
    """The model group's values, before the typed config is built from them."""
    _choice("model.flavour", model.get("flavour"), FLAVOURS)
    _choice("model.dtype", model.get("dtype"), DTYPES)
    _choice("model.rope_full_precision", model.get("rope_full_precision"), (None, True, False))
    _choice("model.attention", model.get("attention"), (None, *ATTENTIONS))
    _choice("model.block_grid", model.get("block_grid"), (None, *BLOCK_GRIDS))
    _check_compile(model)
    forbidden = model.get("forbidden_tokens") or []
    if not isinstance(forbidden, list) or not all(isinstance(t, str) and t for t in forbidden):
        _fail("model.forbidden_tokens", forbidden, "a list of token strings (looked up in the model's tokenizer)")
    _check_device(model.get("device"))
    path = str(model.get("name_or_path"))
    if is_adapter_dir(path):  # a PEFT adapter (D2F): its base checkpoint is what the checks below read
        try:
            path = checkpoint_of(path)
        except AdapterError as e:
            raise ConfigError(f"model.name_or_path={model.get('name_or_path')!r}: {e}") from None
    local = Path(path)
    if local.exists():
        if not local.is_dir() or not os.access(local / "config.json", os.R_OK):
            _fail("model.name_or_path", path, "a readable model directory with config.json is required")
        try:
            raw = json.loads((local / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"model.name_or_path={path!r}: config.json is unreadable ({e})") from None
        model_type = raw.get("model_type")
        try:  # a config the network does not compute is refused here, before any data or weights are read
            parse_config(raw, name_or_path=path)
        except ModelConfigError as e:
            raise ConfigError(f"model.name_or_path={path!r}: {e}") from None
        flavour = MODEL_TYPES.get(model_type)
        if flavour is not None and flavour != model.get("flavour"):
            _fail("model.flavour", model.get("flavour"), f"the checkpoint {path!r} is a {flavour!r} model "
                                                          f"(config.json model_type={model_type!r})")
        if not os.access(local / "tokenizer.json", os.R_OK):
            _fail("model.name_or_path", path, f"no readable tokenizer.json in {path} (prompts are encoded with the "
                                              "tokenizer saved beside the weights); copy the checkpoint's tokenizer "
                                              "files there")
    elif local.is_absolute() or path.startswith(".") or not HUB_ID.match(path):
        _fail("model.name_or_path", path,
              "no such directory; give a readable model directory or a Hugging Face id 'org/name'")


def task_options(task: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for `get_task`: the task group minus its name."""
    return {k: v for k, v in task.items() if k != "name"}


def build_task(task: dict[str, Any]) -> Task:
    """Construct the task (cheap: rows load lazily); errors become ConfigErrors naming the task key."""
    name = task.get("name")
    _choice("task.name", name, TASKS)
    for key in DATA_KEYS:
        value = task.get(key)
        if value is None:
            continue
        paths = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        for path in paths:
            _readable_file(f"task.{key}", str(path))
    try:
        built = get_task(name, **task_options(task))
        built.preflight()
        return built
    except TypeError as e:
        allowed = ", ".join(sorted({"name", *(f.name for f in fields(TaskConfig))} - {"rank", "world_size"}))
        allowed = f"{allowed} and the task's own options (docs/tasks.md)"
        unexpected = UNEXPECTED_ARGUMENT.search(str(e))
        if unexpected and unexpected.group(1) in task:
            key = unexpected.group(1)
            _fail(f"task.{key}", task[key], f"unknown key for task {name!r}; allowed: {allowed}")
        raise ConfigError(f"task={name!r}: {e}; allowed: {allowed}") from None
    except ValueError as e:
        raise ConfigError(f"task={name!r}: {e}") from None


def _validate_timing_docs(run: RunConfig) -> None:
    """`timing_docs` (batched mode): a batch-1 timing pass over at most the run's own documents."""
    n = run.timing_docs
    if n is None:
        return
    if run.batch_size == 1:
        _fail("timing_docs", n, "only with batch_size > 1 (at batch_size=1 the run's own tokens/s is already "
                                "a batch-1 timing); set timing_docs=null")
    limit = run.limit
    if limit is not None and n > limit:
        _fail("timing_docs", n, f"at most limit={limit} (the batch-1 pass times the first timing_docs of the "
                                "run's documents)")


def _validate_top_level(run: RunConfig) -> None:
    """The relations between top-level keys (each key's type and range: `check_keys`)."""
    _validate_timing_docs(run)
    _choice("count_rule", run.count_rule, COUNT_RULES)
    _choice("confidence_precision", run.confidence_precision, PRECISIONS)


def checked_run_config(c: dict[str, Any]) -> RunConfig:
    """The typed config of a resolved plain one whose every key and type is accepted (`check_keys`), its decoding
    choices judged by the builders (`check_decoding`); nothing is read from disk."""
    check_keys(c)
    run = RunConfig.from_dict(c)
    check_decoding(run)
    return run


def validate_config(cfg: DictConfig | dict) -> RunConfig:
    """Check every key and rule of docs/runner.md ("Validation"); return the typed run config."""
    c = to_container(cfg)
    tracking_settings(c.pop("tracking", None))  # checked here, no part of the run's config (dllm_bench/tracking)
    check_keys(c)
    check_output_location(c["output_dir"], c["name"])
    _validate_model(c["model"])
    run = RunConfig.from_dict(c)
    positions = model_positions(run.model.name_or_path)
    if positions is not None:
        check_answer_fits(run.gen_length, *positions)
    task = build_task(run.task.as_dict())
    _validate_top_level(run)
    check_decoding(run)
    _validate_combination(run, task)
    return run
