"""Loading benchmark rows: a local file (offline) or `datasets.load_dataset` (hub), with row validation."""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterable
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A data file is missing or a row lacks a field; the message names the file, the row and the field."""


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a .jsonl(.gz), .json (array, or object of rows keyed by id), .csv or .parquet file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl"):
        rows = []
        with _open_text(path) as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}: line {lineno} is not valid JSON ({e})") from None
        return rows
    if name.endswith(".json"):
        with _open_text(path) as f:
            try:
                obj = json.load(f)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: not valid JSON ({e})") from None
        if isinstance(obj, dict):
            return list(obj.values())
        if isinstance(obj, list):
            return obj
        raise DataError(f"{path}: expected a JSON array or object of rows, got {type(obj).__name__}")
    if name.endswith(".csv"):
        with _open_text(path) as f:
            return list(csv.DictReader(f))
    if name.endswith(".parquet"):
        import datasets

        return list(datasets.load_dataset("parquet", data_files=str(path), split="train"))
    raise DataError(f"{path}: unknown file type; expected .jsonl, .jsonl.gz, .json, .csv or .parquet")


def check_fields(rows: Iterable[dict], required: Iterable[str], source: str) -> list[dict]:
    """Raise DataError naming the source, the row and the field when a row misses a required field."""
    required = tuple(required)
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{source}: row {i} is a {type(row).__name__}, expected an object with {required}")
        for key in required:
            if key not in row or row[key] is None:
                raise DataError(f"{source}: row {i} has no field {key!r} (required: {', '.join(required)})")
        out.append(row)
    return out


def resolve_local(data_files: str | None, data_dir: str | None, default_names: Iterable[str]) -> Path | None:
    """The local file to read: `data_files` itself, or the first of `default_names` found in `data_dir`."""
    if data_files is not None:
        return Path(data_files)
    if data_dir is None:
        return None
    names = tuple(default_names)
    for name in names:
        candidate = Path(data_dir) / name
        if candidate.is_file():
            return candidate
    raise DataError(f"data_dir {data_dir}: none of {', '.join(names)} found there")


def load_rows(
    *,
    data_files: str | None,
    data_dir: str | None,
    default_names: Iterable[str],
    hub_path: str,
    hub_name: str | None,
    hub_split: str,
    required: Iterable[str],
) -> tuple[list[dict], str]:
    """Rows from the local override when given, else from the hub; returns (rows, source description)."""
    local = resolve_local(data_files, data_dir, default_names)
    if local is not None:
        rows = read_rows(local)
        source = str(local)
    else:
        rows = load_hub_rows(hub_path, hub_name, hub_split)
        source = f"hub:{hub_path}" + (f"/{hub_name}" if hub_name else "") + f"[{hub_split}]"
    return check_fields(rows, required, source), source


def hub_unreachable(timeout_s: float = 5.0) -> str | None:
    """Why the Hugging Face hub cannot be reached (one request, no retries), or None when it answers or when
    offline mode is already on (then the libraries never try the network)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return None
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout_s)
    except Exception as e:  # DNS, refused, proxy, timeout: any of them means every retry would fail too
        return f"{constants.ENDPOINT} unreachable: {type(e).__name__}"
    return None


@contextmanager
def _offline():
    """Offline mode for one load: a cached dataset still loads, a missing one fails at once (no retry lines)."""
    import datasets
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


def load_hub_rows(path: str, name: str | None, split: str) -> list[dict[str, Any]]:
    """Rows of a hub dataset split (needs internet or a warm HF cache); without a network the cache is read
    offline at once instead of after the hub client's retries."""
    import datasets

    unreachable = hub_unreachable()
    try:
        with _offline() if unreachable else nullcontext():
            ds = datasets.load_dataset(path, name, split=split)
    except Exception as e:  # the hub raises many types; keep the cause, add what to do offline
        cause = f"{unreachable}, and not in the local cache" if unreachable else str(e)
        raise DataError(
            f"could not load {path}" + (f"/{name}" if name else "") + f" split {split!r} from the hub ({cause}); "
            "offline, pass data_files=<file> or data_dir=<folder> in the task config"
        ) from e
    return [dict(r) for r in ds]
