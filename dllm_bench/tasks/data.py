"""Loading benchmark rows: a local file (offline) or `datasets.load_dataset` (hub), with row validation."""

from __future__ import annotations

import ast
import csv
import gzip
import json
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A data file is missing or a row lacks a field; the message names the file, the row and the field."""


class Rows(list):
    """The rows of a file with where each one starts (`lines[i]`, 1-based) where the format has lines."""

    lines: list[int] | None = None

    def where(self, i: int) -> str:
        """`line 4 (row 3)` for a line-based file, else `row 3`."""
        return f"line {self.lines[i]} (row {i})" if self.lines is not None and i < len(self.lines) else f"row {i}"


def _where(rows: Iterable[dict], i: int) -> str:
    return rows.where(i) if isinstance(rows, Rows) else f"row {i}"


@dataclass(frozen=True)
class Field:
    """What one field of a task's row must hold: `check(value)` true; `allowed` says it in the refusal."""

    check: Callable[[Any], bool]
    allowed: str


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())


def asserts_something(code: Any) -> bool:
    """Python source holding an `assert` whose test is not a constant (`assert True`, `pass` and "" test nothing:
    any program, a wrong one too, would pass them)."""
    if not isinstance(code, str):
        return False
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.Assert) and not isinstance(n.test, ast.Constant) for n in ast.walk(tree))


def defines_function(code: str, name: str) -> bool:
    """Whether Python source defines `name` at its top level."""
    try:
        return any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.parse(code).body)
    except SyntaxError:
        return False


PRESENT = Field(lambda v: v is not None, "a value")
TEXT = Field(_text, "a non-empty string")
STRING = Field(lambda v: isinstance(v, str), "a string")
INTEGER = Field(_integer, "an integer")
IDENTIFIER = Field(lambda v: isinstance(v, str) and v.isidentifier(), "a Python name")


def assert_list(minimum: int) -> Field:
    """A list of at least `minimum` test strings, each an assert that tests something (MBPP's `test_list`)."""
    return Field(lambda v: isinstance(v, list) and len(v) >= minimum and all(asserts_something(t) for t in v),
                 f"a list of at least {minimum} strings, each an assert statement that tests something "
                 "(not '', 'pass' or 'assert True')")


Schema = Mapping[str, Field]


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a .jsonl(.gz), .json (array, or object of rows keyed by id), .csv or .parquet file."""
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path} is a folder, not a data file; give one file (data_files) or the folder as data_dir")
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    rows = _read_rows(path)
    if not rows:
        raise DataError(f"{path} holds no rows (the file is empty); a data file needs at least one document")
    return rows


def _read_rows(path: Path) -> Rows:
    name = path.name.removesuffix(".gz")
    rows = Rows()
    if name.endswith(".jsonl"):
        rows.lines = []
        with _open_text(path) as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}: line {lineno} is not valid JSON ({e})") from None
                rows.lines.append(lineno)
        return rows
    if name.endswith(".json"):
        with _open_text(path) as f:
            try:
                obj = json.load(f)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: not valid JSON ({e})") from None
        if isinstance(obj, dict):
            return Rows(obj.values())
        if isinstance(obj, list):
            return Rows(obj)
        raise DataError(f"{path}: expected a JSON array or object of rows, got {type(obj).__name__}")
    if name.endswith(".csv"):
        rows.lines = []
        with _open_text(path) as f:
            reader = csv.DictReader(f)
            for row in reader:
                rows.append(row)
                rows.lines.append(reader.line_num)
        return rows
    if name.endswith(".parquet"):
        import datasets

        return Rows(datasets.load_dataset("parquet", data_files=str(path), split="train"))
    raise DataError(f"{path}: unknown file type; expected .jsonl, .jsonl.gz, .json, .csv or .parquet")


def check_fields(rows: Iterable[dict], required: Iterable[str] | Schema, source: str) -> list[dict]:
    """Raise DataError naming the source, the line (row), the field and what is allowed when a row misses a
    required field or holds a value outside its schema (`required`: field names, or field -> `Field`)."""
    schema = dict(required) if isinstance(required, Mapping) else {key: PRESENT for key in required}
    names = tuple(schema)
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{source}: {_where(rows, i)} is a {type(row).__name__}, expected an object with {names}")
        for key, rule in schema.items():
            if key not in row or row[key] is None:
                raise DataError(f"{source}: {_where(rows, i)} has no field {key!r} (required: {', '.join(names)})")
            if not rule.check(row[key]):
                shown = repr(row[key]) if len(repr(row[key])) <= 80 else repr(row[key])[:77] + "..."
                raise DataError(f"{source}: {_where(rows, i)} field {key!r} is {shown} ({type(row[key]).__name__}); "
                                f"allowed: {rule.allowed}")
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
    required: Iterable[str] | Schema,
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
