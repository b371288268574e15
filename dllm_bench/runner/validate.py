"""Validate a composed run config before any weights or data are read; errors name key, value and choices."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from dllm_bench.models.config import MODEL_TYPES
from dllm_bench.runner.config import to_container
from dllm_bench.tasks import TASKS, Task, get_task

SELECTORS = ("topk", "threshold", "factor", "frechet", "slowfast", "dream", "oracle")
CACHES = ("none", "prefix", "dual", "dllm_cache")
FLAVOURS = ("llada", "dream")
DREAM_ALGS = ("origin", "maskgit_plus", "topk_margin", "entropy")
DTYPES = (None, "float32", "bfloat16", "float16")
COUNT_RULES = ("cut", "nonstop", "canvas", "all")
PRECISIONS = ("float64", "float32", "bfloat16", "float16", "model")
FACTOR_RULES = ("paper", "code")
CACHE_LOOPS = ("correct",)  # the engine runs a block until it is full; the release loop is not offered
FIXED_STEP_SELECTORS = ("topk", "dream")
SELECTOR_FLAVOURS = {"dream": ("dream",)}
DATA_KEYS = ("data_files", "data_file", "data_dir", "data_path")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+|mps|per_job)$")


class ConfigError(ValueError):
    """A run config value is not allowed; the message names key, value and what is allowed."""


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def _choice(key: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if value not in choices:
        _fail(key, value, "choose one of " + ", ".join(repr(c) for c in choices))


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(key, value, "a number is required")
    return float(value)


def _integer(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(key, value, f"an integer >= {minimum} is required")
    return int(value)


def _interval(key: str, value: Any, low: float, high: float, low_open: bool, high_open: bool) -> None:
    x = _number(key, value)
    ok_low = x > low if low_open else x >= low
    ok_high = x < high if high_open else x <= high
    if not (ok_low and ok_high):
        text = ("(" if low_open else "[") + f"{low:g}, {high:g}" + (")" if high_open else "]")
        _fail(key, value, f"must lie in {text}")


def _validate_lengths(c: dict[str, Any]) -> None:
    gen = _integer("gen_length", c.get("gen_length"), 1)
    block = _integer("block_length", c.get("block_length"), 1)
    if gen % block:
        _fail("gen_length", gen, f"must be a multiple of block_length={block}")
    steps = c.get("steps")
    selector = c["selector"]["name"]
    if steps is None:
        if selector in FIXED_STEP_SELECTORS:
            _fail("steps", steps, f"selector {selector!r} needs a fixed number of steps (an integer >= 1)")
        return
    if selector not in FIXED_STEP_SELECTORS:
        _fail("steps", steps, f"selector {selector!r} is adaptive (a block runs until full); steps must be null")
    steps = _integer("steps", steps, 1)
    blocks = gen // block
    if steps % blocks:
        _fail("steps", steps, f"fixed steps must be divisible by the number of blocks {blocks} "
                              f"(gen_length {gen} / block_length {block})")


def _validate_selector(sel: dict[str, Any]) -> None:
    name = sel.get("name")
    _choice("selector.name", name, SELECTORS)
    if name == "threshold":
        _interval("selector.tau", sel.get("tau"), 0.0, 1.0, low_open=True, high_open=False)
    elif name == "factor":
        if _number("selector.f", sel.get("f")) <= 0:
            _fail("selector.f", sel.get("f"), "must be > 0")
    elif name == "frechet":
        _interval("selector.delta", sel.get("delta"), 0.0, 1.0, low_open=False, high_open=True)
    elif name == "topk":
        _choice("selector.remasking", sel.get("remasking", "low_confidence"), ("low_confidence", "random"))
    elif name == "dream":
        _choice("selector.alg", sel.get("alg"), DREAM_ALGS)
    elif name == "slowfast":
        _integer("selector.explore_steps", sel.get("explore_steps"), 1)
        _integer("selector.window", sel.get("window"), 1)
        _interval("selector.tau_min", sel.get("tau_min"), 0.0, 1.0, low_open=True, high_open=False)
        _interval("selector.tau_high", sel.get("tau_high"), 0.0, 1.0, low_open=True, high_open=False)
        _choice("selector.variant", sel.get("variant", "llada"), ("llada", "dream"))
        _choice("selector.preset", sel.get("preset", "code"), ("code", "paper", "dream"))
        if sel.get("explore_tau") is not None:
            _interval("selector.explore_tau", sel["explore_tau"], 0.0, 1.0, low_open=True, high_open=False)
        if _number("selector.std_threshold", sel.get("std_threshold")) <= 0:
            _fail("selector.std_threshold", sel.get("std_threshold"), "must be > 0")


def _validate_cache(cache: dict[str, Any]) -> None:
    name = cache.get("name")
    _choice("cache.name", name, CACHES)
    if name in ("prefix", "dual") and cache.get("refresh_interval") is not None:
        _integer("cache.refresh_interval", cache["refresh_interval"], 1)
    if name == "dllm_cache":
        for key in ("prompt_interval", "response_interval"):
            value = cache.get(key)
            if value != -1 and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                _fail(f"cache.{key}", value, "an integer >= 1, or -1 for every step")
        _interval("cache.verify_ratio", cache.get("verify_ratio"), 0.0, 1.0, low_open=False, high_open=False)


def _validate_combination(c: dict[str, Any], task: Task) -> None:
    selector, cache, flavour = c["selector"]["name"], c["cache"]["name"], c["model"]["flavour"]
    flavours = SELECTOR_FLAVOURS.get(selector, FLAVOURS)
    if flavour not in flavours:
        _fail("model.flavour", flavour, f"selector {selector!r} runs on {', '.join(flavours)} models only")
    gen, block = c["gen_length"], c["block_length"]
    dream_slowfast = selector == "slowfast" and c["selector"].get("variant") == "dream"
    if (selector == "dream" or dream_slowfast) and block != gen:
        label = "slowfast (variant dream)" if dream_slowfast else selector
        _fail("block_length", block, f"selector {label!r} has no blocks: block_length must equal gen_length={gen}")
    if float(c.get("cfg_scale", 0.0)) > 0 and cache != "none":
        _fail("cfg_scale", c["cfg_scale"], f"classifier-free guidance runs only with cache=none, not {cache!r}")
    if (c.get("compat") or {}).get("slowfast_truncate") and (selector != "slowfast" or cache != "none"):
        _fail("compat.slowfast_truncate", True, "applies to selector slowfast with cache none only")
    if task.needs_images and not c["model"].get("vision"):
        _fail("task.name", c["task"]["name"],
              f"needs images, but model {c['model']['name_or_path']!r} is text-only (model.vision=false); "
              "use a vision model such as model=llada_v")


def _readable_file(key: str, path: str) -> None:
    p = Path(path)
    if not p.exists() or not os.access(p, os.R_OK):
        _fail(key, path, "must be a readable file or directory")


def _validate_model(model: dict[str, Any]) -> None:
    _choice("model.flavour", model.get("flavour"), FLAVOURS)
    _choice("model.dtype", model.get("dtype"), DTYPES)
    forbidden = model.get("forbidden_tokens") or []
    if not isinstance(forbidden, list) or not all(isinstance(t, str) and t for t in forbidden):
        _fail("model.forbidden_tokens", forbidden, "a list of token strings (looked up in the model's tokenizer)")
    device = model.get("device")
    if device is not None and not DEVICE.match(str(device)):
        _fail("model.device", device, "null, cpu, cuda, cuda:N, mps or per_job")
    path = str(model.get("name_or_path"))
    local = Path(path)
    if local.exists():
        if not local.is_dir() or not os.access(local / "config.json", os.R_OK):
            _fail("model.name_or_path", path, "a readable model directory with config.json is required")
        try:
            model_type = json.loads((local / "config.json").read_text()).get("model_type")
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"model.name_or_path={path!r}: config.json is unreadable ({e})") from None
        flavour = MODEL_TYPES.get(model_type)
        if flavour is not None and flavour != model.get("flavour"):
            _fail("model.flavour", model.get("flavour"), f"the checkpoint {path!r} is a {flavour!r} model "
                                                          f"(config.json model_type={model_type!r})")
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
        return get_task(name, **task_options(task))
    except TypeError as e:
        raise ConfigError(f"task={name!r}: {e}; allowed options are those of TaskConfig (docs/tasks.md)") from None
    except ValueError as e:
        raise ConfigError(f"task={name!r}: {e}") from None


def _validate_top_level(c: dict[str, Any]) -> None:
    _integer("batch_size", c.get("batch_size"), 1)
    _integer("offset", c.get("offset", 0), 0)
    _integer("warmup", c.get("warmup", 0), 0)
    if c.get("num_threads") is not None:
        _integer("num_threads", c["num_threads"], 1)
    if c.get("limit") is not None:
        _integer("limit", c["limit"], 0)
    if _number("temperature", c.get("temperature")) < 0:
        _fail("temperature", c.get("temperature"), "must be >= 0")
    if _number("cfg_scale", c.get("cfg_scale")) < 0:
        _fail("cfg_scale", c.get("cfg_scale"), "must be >= 0")
    _choice("count_rule", c.get("count_rule"), COUNT_RULES)
    _choice("confidence_precision", c.get("confidence_precision", "float64"), PRECISIONS)
    if not isinstance(c.get("confidence_mask_in_softmax", True), bool):
        _fail("confidence_mask_in_softmax", c.get("confidence_mask_in_softmax"), "must be true or false")
    compat = c.get("compat") or {}
    _choice("compat.factor_rule", compat.get("factor_rule", "paper"), FACTOR_RULES)
    _choice("compat.cache_loop", compat.get("cache_loop", "correct"), CACHE_LOOPS)
    known = {"factor_rule", "cache_loop", "dream_cache_force_first", "slowfast_truncate"}
    for key in compat:
        _choice("compat", key, sorted(known))


def validate_config(cfg: DictConfig | dict) -> dict[str, Any]:
    """Check every rule of docs/runner.md ("Validation"); return the resolved plain config."""
    c = to_container(cfg)
    for group in ("model", "task", "cache", "selector"):
        if not isinstance(c.get(group), dict):
            _fail(group, c.get(group), f"the config group {group!r} must be selected (see conf/{group}/)")
    _validate_selector(c["selector"])
    _validate_cache(c["cache"])
    _validate_model(c["model"])
    task = build_task(c["task"])
    _validate_top_level(c)
    _validate_lengths(c)
    _validate_combination(c, task)
    return c
