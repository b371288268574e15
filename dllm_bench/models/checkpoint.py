"""Checkpoint files without the networks' loaders: locate, read config and tensor headers, tokenizer, fingerprint.

Everything that can be checked from headers (config, tensor names, shapes, shard files) is checked before any
weight is read or any large tensor allocated, so a bad directory fails in milliseconds with a precise message.
Both loaders (`loading.load_model`, `llada_v.load_llada_v`) build on this module; it imports neither.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

import torch

from .config import ModelConfig, ModelConfigError
from .network import DiffusionLM
from .tensor_names import canonical_name

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
# files a hub download needs; no *.py, so no remote code can even reach the disk
HUB_PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.txt", "*.model", "*.tiktoken"]
# what a run that only tokenizes needs (a served backend: the server holds the weights)
NO_WEIGHT_PATTERNS = [p for p in HUB_PATTERNS if p != "*.safetensors"]
# the special token that ends a turn, per flavour
EOT_TOKENS = {"llada": "<|eot_id|>", "dream": "<|im_end|>"}


class CheckpointError(ValueError):
    """A checkpoint directory that does not match the network it declares."""


def resolve_checkpoint_dir(name_or_path: str | Path, revision: str | None = None, *, weights: bool = True) -> Path:
    """A local directory as is; a hub id (``owner/name``, not an existing path) downloaded without code files (and
    without its weights when ``weights`` is False: config and tokenizer only)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    text = str(name_or_path)
    looks_local = text.startswith((".", "/", "~")) or text.count("/") != 1 or path.exists()
    if looks_local:
        raise FileNotFoundError(f"model directory {text!r} does not exist (expected a directory with config.json)")
    from huggingface_hub import snapshot_download

    try:
        patterns = HUB_PATTERNS if weights else NO_WEIGHT_PATTERNS
        return Path(snapshot_download(repo_id=text, revision=revision, allow_patterns=patterns))
    except Exception as err:  # offline, unknown repo, gated
        raise FileNotFoundError(
            f"{text!r} is neither a local directory nor a downloadable hub model ({type(err).__name__}: {err})"
        ) from err


def read_config(directory: Path) -> dict[str, Any]:
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{cfg_path} is missing: a checkpoint directory needs config.json")
    try:
        return json.loads(cfg_path.read_text())
    except json.JSONDecodeError as err:
        raise ModelConfigError(f"{cfg_path} is not valid JSON: {err}") from err


def checkpoint_tensors(directory: Path) -> dict[str, tuple[Path, tuple[int, ...]]]:
    """Tensor name -> (file, shape) from safetensors headers (single file or sharded index); no data read."""
    from safetensors import safe_open

    index = directory / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index} has no weight_map")
        files = sorted(set(weight_map.values()))
    elif (directory / SINGLE_FILE).is_file():
        weight_map, files = None, [SINGLE_FILE]
    else:
        raise FileNotFoundError(f"no weights in {directory}: expected {SINGLE_FILE} or {INDEX_FILE}")
    out: dict[str, tuple[Path, tuple[int, ...]]] = {}
    for name in files:
        f = directory / name
        if not f.is_file():
            raise FileNotFoundError(f"weight file {f} (named in {INDEX_FILE}) is missing")
        try:
            with safe_open(str(f), framework="pt") as st:
                for key in st.keys():
                    out[key] = (f, tuple(st.get_slice(key).get_shape()))
        except Exception as err:
            raise CheckpointError(f"weight file {f} is corrupted or not safetensors: {err}") from err
    if weight_map is not None:
        listed = set(weight_map)
        missing_in_files = sorted(listed - set(out))
        if missing_in_files:
            raise CheckpointError(f"tensor {missing_in_files[0]!r} is listed in {INDEX_FILE} but in no shard")
    return out


def detect_naming(names: list[str]) -> str:
    """'olmo' for ``model.transformer.*`` tensors (original LLaDA), 'llama' for LLaMA/Qwen2 names."""
    return "olmo" if any(n.startswith("model.transformer.") for n in names) else "llama"


def validate_tensors(model: DiffusionLM, found: dict[str, tuple[Path, tuple[int, ...]]]) -> None:
    """Every expected tensor present with its shape, nothing unexpected; errors name the tensor."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    unexpected = sorted(set(found) - set(expected))
    if unexpected:
        hint = canonical_name(unexpected[0], model.config.tensor_naming)
        raise CheckpointError(
            f"unexpected tensor {unexpected[0]!r} in {found[unexpected[0]][0]}"
            + ("" if hint else f" (not a {model.config.flavour} tensor name)")
            + (f"; {len(unexpected) - 1} more" if len(unexpected) > 1 else "")
        )
    missing = sorted(set(expected) - set(found))
    if missing:
        raise CheckpointError(
            f"missing tensor {missing[0]!r}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
        )
    for name, shape in expected.items():
        if found[name][1] != shape:
            raise CheckpointError(
                f"tensor {name!r} in {found[name][0]} has shape {list(found[name][1])}; the config needs {list(shape)}"
            )


def load_tokenizer(directory: Path) -> Any:
    """The tokenizer saved beside the weights, through AutoTokenizer (never trusting remote code)."""
    if not (directory / "tokenizer.json").is_file():
        return None
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # AutoTokenizer peeks at config.json and warns that model_type is unknown to it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
    except (ValueError, OSError, AttributeError):
        # custom tokenizer classes (Dream's DreamTokenizer) live in checkpoint code we refuse to run;
        # their tokenizer.json is a plain fast tokenizer
        cfg_path = directory / "tokenizer_config.json"
        extra = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        keep = {k: extra[k] for k in ("bos_token", "eos_token", "pad_token", "chat_template") if k in extra}
        return PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"), **keep)
    finally:
        hf_logging.set_verbosity(level)


def is_llada_v_config(raw: dict[str, Any]) -> bool:
    """LLaDA-V (LLaVA-style) checkpoints: ``model_type: llava_llada`` or a vision tower in the config."""
    return raw.get("model_type") == "llava_llada" or "mm_vision_tower" in raw or "vision_config" in raw


def checkpoint_fingerprint(name_or_path: str | Path, whole_bytes: int = 32 << 20, *,
                           weights: bool = True) -> str | None:
    """Content fingerprint of a local checkpoint (None for a hub id): sha256 over config.json and, per weight
    file, its name, size and every byte — files up to ``whole_bytes`` hashed inline (as fingerprints have always
    been), larger ones by their full SHA-256, computed once per file version and cached (``file_digest``).
    ``weights=False`` digests config.json (and an adapter's config) only: a served run, whose weights are the
    server's, is the same run from a full checkpoint or from a folder holding only its config and tokenizer.

    Results are keyed by it, so retrained or damaged weights never reuse runs made with the old ones.
    """
    from .file_digest import file_sha256
    from .lora import ADAPTER_CONFIG, checkpoint_of, is_adapter_dir

    directory = Path(name_or_path).expanduser()
    if not directory.is_dir():
        return None
    digest = hashlib.sha256()
    if is_adapter_dir(directory):  # a PEFT adapter: its files and its base's fingerprint
        base = checkpoint_fingerprint(checkpoint_of(directory), whole_bytes, weights=weights)
        digest.update(f"base={base}:".encode())
    weight_suffixes = (".safetensors", ".bin", ".pt") if weights else ()
    for f in sorted(directory.iterdir()):
        if f.name not in ("config.json", ADAPTER_CONFIG) and f.suffix not in weight_suffixes:
            continue
        size = f.stat().st_size
        digest.update(f"{f.name}:{size}:".encode())
        if size > whole_bytes:
            digest.update(f"sha256={file_sha256(f)}".encode())
        else:
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device_dtype(
    device: torch.device | str | None, dtype: torch.dtype | str | None
) -> tuple[torch.device, torch.dtype]:
    """Defaults: CUDA if present, bf16 on CUDA and fp32 elsewhere; dtype names like 'bfloat16' accepted."""
    device = torch.device(device or default_device())
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    elif isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"dtype {dtype!r} is not a torch dtype; use e.g. 'float32' or 'bfloat16'")
        dtype = getattr(torch, dtype)
    return device, dtype


def _read_tensors(
    found: dict[str, tuple[Path, tuple[int, ...]]], device: torch.device, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    by_file: dict[Path, list[str]] = {}
    for name, (f, _) in found.items():
        by_file.setdefault(f, []).append(name)
    state: dict[str, torch.Tensor] = {}
    for f, names in by_file.items():
        with safe_open(str(f), framework="pt", device=str(device)) as st:
            for name in names:
                state[name] = st.get_tensor(name).to(dtype)
    return state


def token_ids(tokenizer: Any, tokens: Any, what: str) -> tuple[int, ...]:
    """Ids of special-token strings in this tokenizer; a token it lacks is an error naming it and ``what``."""
    ids = []
    for tok in tokens:
        i = tokenizer.convert_tokens_to_ids(tok)
        if not isinstance(i, int) or i == tokenizer.unk_token_id:
            raise ValueError(f"{what}: {tok!r} is not in the tokenizer's vocabulary")
        ids.append(i)
    return tuple(ids)


def _fill_special_ids(config: ModelConfig, tokenizer: Any) -> None:
    """End-of-turn and BOS ids from the tokenizer when the config does not carry them."""
    if tokenizer is None:
        return
    eot = tokenizer.convert_tokens_to_ids(config.eot_token or EOT_TOKENS[config.flavour])
    if isinstance(eot, int) and eot != tokenizer.unk_token_id:
        config.eot_token_id = eot
    if config.bos_token_id is None and tokenizer.bos_token_id is not None:
        config.bos_token_id = tokenizer.bos_token_id
