"""LoRA adapters in PEFT's on-disk format (``adapter_config.json`` + ``adapter_model.safetensors``), merged into a
checkpoint's weights at load: D2F ships its block-diffusion training as such an adapter on LLaDA-8B-Instruct and
Dream-v0-Base-7B.

PEFT names an adapter tensor ``base_model.model.<module>.lora_A.weight`` ([r, in]) and ``.lora_B.weight``
([out, r]) where ``<module>.weight`` is the base checkpoint's tensor; the merged weight is
``W + scaling * B @ A`` with ``scaling = lora_alpha / r`` (``/ sqrt(r)`` with ``use_rslora``). An adapter
directory names its base in ``base_model_name_or_path`` (a hub id, or a path, relative ones from the adapter's
directory). Anything this merge does not compute (DoRA, bias training, saved full modules, per-module ranks)
is refused in one line, as is an adapter whose tensors do not fit the base.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
LORA_SUFFIXES = (".lora_A.weight", ".lora_B.weight")
# the modules D2F's training wraps (SJTU-DENG-Lab/Discrete-Diffusion-Forcing D2F-train/utils/model.py):
# r 32, alpha 32, LLaDA's attention projections by their OLMo names, Dream's by Qwen2's
D2F_TARGET_MODULES = {"llada": ("q_proj", "k_proj", "v_proj", "attn_out"), "dream": ("q_proj", "k_proj", "v_proj", "o_proj")}
# adapter_config.json keys whose other values change what the adapter computes: key -> allowed values
_UNSUPPORTED_IF_NOT = {
    "peft_type": ("LORA",), "use_dora": (None, False), "bias": (None, "none"), "fan_in_fan_out": (None, False),
    "modules_to_save": (None, [], ()), "rank_pattern": (None, {}), "alpha_pattern": (None, {}),
    "layers_to_transform": (None,), "use_qalora": (None, False), "lora_bias": (None, False),
}


class AdapterError(ValueError):
    """An adapter this merge does not compute, or one that does not fit its base checkpoint."""


def is_adapter_dir(directory: str | Path) -> bool:
    """A PEFT adapter directory: its config, no ``config.json`` of a full checkpoint."""
    path = Path(directory).expanduser()
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def read_adapter_config(directory: str | Path) -> dict[str, Any]:
    """The adapter's config, checked for what the merge computes (one line naming the key otherwise)."""
    path = Path(directory).expanduser() / ADAPTER_CONFIG
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise AdapterError(f"{path} is not a readable adapter config: {err}") from err
    for key, allowed in _UNSUPPORTED_IF_NOT.items():
        if cfg.get(key) not in allowed:
            raise AdapterError(f"adapter {path.parent} has {key}={cfg.get(key)!r}, which the LoRA merge does not "
                               f"compute; allowed: {[a for a in allowed if a not in (None, [], (), {})] or 'unset'}")
    for key in ("r", "lora_alpha", "base_model_name_or_path"):
        if cfg.get(key) in (None, ""):
            raise AdapterError(f"adapter {path.parent} lacks {key} in {ADAPTER_CONFIG}")
    return cfg


def base_of(directory: str | Path, cfg: dict[str, Any]) -> str:
    """The base checkpoint an adapter names: a relative path from the adapter's directory, else as written."""
    base = str(cfg["base_model_name_or_path"])
    local = Path(directory).expanduser() / base
    return str(local.resolve()) if base.startswith(".") or local.is_dir() else base


def checkpoint_of(name_or_path: str | Path) -> str:
    """The full checkpoint behind a model path: an adapter directory's base, anything else as given."""
    path = Path(str(name_or_path)).expanduser()
    return base_of(path, read_adapter_config(path)) if is_adapter_dir(path) else str(name_or_path)


def scaling(cfg: dict[str, Any]) -> float:
    """PEFT's LoRA scale: alpha / r, or alpha / sqrt(r) with rsLoRA."""
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    return alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r


def adapter_pairs(directory: str | Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Base tensor name -> (A [r, in], B [out, r]) from ``adapter_model.safetensors`` (float32)."""
    from safetensors import safe_open

    path = Path(directory).expanduser() / ADAPTER_WEIGHTS
    if not path.is_file():
        raise AdapterError(f"{path} is missing: a PEFT adapter directory holds {ADAPTER_WEIGHTS}")
    halves: dict[str, dict[str, torch.Tensor]] = {}
    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            suffix = next((s for s in LORA_SUFFIXES if name.endswith(s)), None)
            if not name.startswith(PEFT_PREFIX) or suffix is None:
                raise AdapterError(f"adapter tensor {name!r} in {path} is not a PEFT LoRA tensor name "
                                   f"({PEFT_PREFIX}<module>.lora_A.weight / .lora_B.weight)")
            base = name[len(PEFT_PREFIX): -len(suffix)] + ".weight"
            halves.setdefault(base, {})[suffix[1:7]] = f.get_tensor(name).float()
    pairs = {}
    for base, half in sorted(halves.items()):
        if set(half) != {"lora_A", "lora_B"}:
            raise AdapterError(f"adapter {path.parent} has only {sorted(half)} for {base!r}; LoRA needs lora_A and lora_B")
        pairs[base] = (half["lora_A"], half["lora_B"])
    return pairs


def merge_adapter(state: dict[str, torch.Tensor], directory: str | Path, base_name: str = "") -> dict[str, torch.Tensor]:
    """``state`` (a checkpoint's tensors by their names) with the adapter merged: ``W + scaling * B @ A`` computed in
    float32 and cast to each weight's dtype. Refuses (one line) an adapter tensor with no base tensor or whose shapes
    do not fit it, and a rank other than the config's ``r``."""
    cfg = read_adapter_config(directory)
    scale, r = scaling(cfg), int(cfg["r"])
    merged = dict(state)
    for name, (a, b) in adapter_pairs(directory).items():
        if name not in state:
            raise AdapterError(f"adapter {directory} targets {name!r}, which the base checkpoint {base_name or ''} does "
                               "not have (an adapter for another model?)".replace("  ", " "))
        w = state[name]
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != r or b.shape[1] != r or (b.shape[0], a.shape[1]) != tuple(w.shape):
            raise AdapterError(f"adapter {directory} has lora_A {list(a.shape)} and lora_B {list(b.shape)} for {name!r} "
                               f"of shape {list(w.shape)} at r={r}; they must be [r, in] and [out, r]")
        merged[name] = (w.float() + scale * (b.to(w.device) @ a.to(w.device))).to(w.dtype)
    return merged


def save_adapter(directory: str | Path, pairs: dict[str, tuple[torch.Tensor, torch.Tensor]], *, base: str, r: int,
                 lora_alpha: float, target_modules: tuple[str, ...], lora_dropout: float = 0.0) -> Path:
    """Write ``pairs`` (base tensor name -> (A, B)) as a PEFT LoRA adapter directory (its config keys as PEFT writes
    them)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cfg = {
        "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": base, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layers_pattern": None,
        "layers_to_transform": None, "lora_alpha": lora_alpha, "lora_dropout": lora_dropout,
        "modules_to_save": None, "peft_type": "LORA", "r": r, "rank_pattern": {}, "revision": None,
        "target_modules": sorted(target_modules), "task_type": None, "use_dora": False, "use_rslora": False,
    }
    (directory / ADAPTER_CONFIG).write_text(json.dumps(cfg, indent=2) + "\n")
    tensors = {}
    for name, (a, b) in pairs.items():
        module = PEFT_PREFIX + name[: -len(".weight")]
        tensors[module + ".lora_A.weight"] = a.detach().contiguous().cpu()
        tensors[module + ".lora_B.weight"] = b.detach().contiguous().cpu()
    save_file(tensors, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    return directory
