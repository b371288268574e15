"""Config helpers: the `pkg_path` resolver, flattening, and the run id derived from output-affecting keys."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dllm_bench.runner.paths import check_output_location
from dllm_bench.runner.renames import as_first_spelled

PACKAGE_DIR = Path(__file__).resolve().parent.parent
# a built package carries conf/ inside it (setup.py); a checkout (editable install) has it beside the package
CONF_DIR = PACKAGE_DIR / "conf" if (PACKAGE_DIR / "conf").is_dir() else PACKAGE_DIR.parent / "conf"

# Keys that choose which documents run or how a run reports itself, never what a document's output is.
# `timing_docs` only adds a batch-1 timing pass beside the run's own rows, so it shares their folder.
# `limit` and `offset` choose the documents: not part of a setting (tables pool shards), but part of a run's
# identity (runner/identity.py), so that a shard or a longer run is a run of its own.
NON_OUTPUT_KEYS = ("name", "output_dir", "limit", "offset", "progress", "trace", "warmup", "timing_docs",
                   "resume_changed", "hydra", "backend")
# `backend` is hashed as part of a served run's identity instead (runner/identity.py): URL and served model, not
# its patience (concurrency, timeout, retries), which changes no row.
REPO_DIR = PACKAGE_DIR.parent
PACKAGE_MARK = "<dllm_bench>"


def log_dir(output_dir: Any, name: Any) -> str:
    """`${log_dir:${output_dir},${name}}`: Hydra's log folder of a run, after checking that both keys keep it
    inside output_dir (Hydra makes the folder before the app runs, so the check cannot wait for validation)."""
    check_output_location(output_dir, name)
    return f"{output_dir}/.hydra/{name}"


def register_resolvers() -> None:
    """Register `${pkg_path:rel}` (absolute path inside the dllm_bench package) and `${log_dir:...}`; idempotent."""
    if not OmegaConf.has_resolver("pkg_path"):
        OmegaConf.register_new_resolver("pkg_path", lambda rel: str(PACKAGE_DIR / rel))
    if not OmegaConf.has_resolver("log_dir"):
        OmegaConf.register_new_resolver("log_dir", log_dir)


register_resolvers()


def to_container(cfg: DictConfig | dict) -> dict[str, Any]:
    """Resolved plain-dict copy of a config without the `hydra` node."""
    if isinstance(cfg, DictConfig):
        data = OmegaConf.to_container(cfg, resolve=True)
    else:
        data = json.loads(json.dumps(cfg))
    assert isinstance(data, dict)
    data.pop("hydra", None)
    return data


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts to dotted keys (`rule.delta`); lists become JSON strings."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, dotted + "."))
        elif isinstance(value, (list, tuple)):
            flat[dotted] = json.dumps(value)
        else:
            flat[dotted] = value
    return flat


def output_affecting(data: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that can change any sample's output or timing."""
    return {k: v for k, v in data.items() if k not in NON_OUTPUT_KEYS}


def portable(value: Any) -> Any:
    """A config value as written to run.json and runs.csv: a path into the package as `<dllm_bench>/...`, a path
    inside the checkout relative to its root, so that committed results read the same from every checkout."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str):
        if value == str(PACKAGE_DIR) or value.startswith(str(PACKAGE_DIR) + "/"):
            return PACKAGE_MARK + value[len(str(PACKAGE_DIR)):]
        if value.startswith(str(REPO_DIR) + "/"):
            return value[len(str(REPO_DIR)) + 1:]
    return value


def local(value: Any) -> Any:
    """`portable`'s inverse for package paths: `<dllm_bench>/...` as this checkout's absolute path."""
    if isinstance(value, dict):
        return {k: local(v) for k, v in value.items()}
    if isinstance(value, list):
        return [local(v) for v in value]
    if isinstance(value, str) and value.startswith(PACKAGE_MARK):
        return str(PACKAGE_DIR) + value[len(PACKAGE_MARK):]
    return value


def compute_run_id(cfg: DictConfig | dict, identity: dict[str, Any] | None = None) -> str:
    """Stable id `<policy>-<rule>-<cache>-<sha256[:12]>` of the output-affecting settings and, when given, the
    run's identity beyond them (runner/identity.py: code, data, weights, tokenizer, selection); `-paper-` before
    the digest when `task.scoring=paper` (the default `lm_eval` adds nothing)."""
    data = to_container(cfg)
    model = data.get("model")
    if isinstance(model, dict) and str(model.get("device")).startswith(("cuda", "per_job")):
        model["device"] = "cuda"  # which GPU of a machine a run lands on does not change its outputs
    if isinstance(model, dict) and model.get("rope_full_precision", None) is None:
        model.pop("rope_full_precision", None)  # the default (as published) hashes as before the key existed
    for key in ("attention", "block_grid"):  # likewise the block-diffusion switches (None: the checkpoint's)
        if isinstance(model, dict) and model.get(key, None) is None:
            model.pop(key, None)
    if isinstance(model, dict) and model.get("compile", False) is False:
        model.pop("compile", None)  # eager (the default) hashes as before the switch existed
    task = data.get("task")
    scoring = task.pop("scoring", "lm_eval") if isinstance(task, dict) else "lm_eval"
    if scoring != "lm_eval" and isinstance(task, dict):
        task["scoring"] = scoring
    hashed = output_affecting(as_first_spelled(data))  # a renamed key hashes as before (runner/renames.py)
    if identity is not None:
        hashed = {**hashed, "identity": identity}
    blob = json.dumps(hashed, sort_keys=True, default=str)
    # Paths inside the package hash the same in every checkout.
    blob = blob.replace(str(PACKAGE_DIR), PACKAGE_MARK)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    names = [str((data.get(group) or {}).get("name", group)) for group in ("policy", "rule", "cache")]
    mode = [] if scoring == "lm_eval" else [scoring]
    return "-".join([*names, *mode, digest])
