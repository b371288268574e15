"""Find the runs.csv rows of a table cell: compose the cell's config as the runner would and match its values."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from dllm_bench.runner.config import CONF_DIR, NON_OUTPUT_KEYS, PACKAGE_DIR, flatten, to_container
from dllm_bench.runner.group_defaults import group_nodes
from dllm_bench.runner.renames import RENAMED_KEYS

_ABSENT = object()
# Not part of a setting's identity: bookkeeping keys, plus seed (pooled across repeats) and the device.
NON_IDENTITY_KEYS = frozenset(NON_OUTPUT_KEYS) | {"seed", "model.device", "run_id"}
# Columns a runs.csv must have for its rows to be compared at all: what the decoding groups chose.
REQUIRED_KEYS = ("policy.name", "rule.name", "cache.name")
# read_runs' column naming, per row, the keys its own runs.csv lacks (written before the runner recorded them)
ABSENT_COLUMN = "absent_keys"


def override_value(value: Any) -> str:
    """A Python value as Hydra override text (None -> null, bools lower case)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def override_list(overrides: Mapping[str, Any]) -> list[str]:
    """`key=value` strings in insertion order."""
    return [f"{k}={override_value(v)}" for k, v in overrides.items()]


# (conf_state, preset, group choices) -> Hydra's composed config: a table's estimate, its memory check and its
# cell matching compose the same cells, and composing is what costs (about a quarter of a second each).
_COMPOSED: dict[tuple, Any] = {}


def conf_state(conf_dir: Path) -> tuple:
    """What a composition depends on besides its overrides: every file under ``conf_dir`` (path, size, mtime) and
    the registered groups' default nodes, so an edited conf file or a method registered since composes afresh."""
    files = sorted((str(p.relative_to(conf_dir)), p.stat().st_size, p.stat().st_mtime_ns)
                   for p in conf_dir.rglob("*") if p.is_file())
    return (str(conf_dir), tuple(files), repr(group_nodes()))


def compose_configs(
    requests: Iterable[tuple[str | None, Mapping[str, Any]]], conf_dir: Path = CONF_DIR
) -> list[dict[str, Any]]:
    """Resolved configs (plain nested dicts) the runner would get for each `experiment=<preset> <overrides>`.

    Hydra composes each distinct (preset, group choices) once; value overrides are then set on a copy, which
    is what Hydra does with `key=value` after composing (composing is slow, setting a value is not).
    """
    conf_dir = Path(conf_dir).resolve()
    requests = list(requests)
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir()}
    split = []
    for preset, overrides in requests:
        choices = tuple((k, v) for k, v in overrides.items() if k in groups)
        values = {k: v for k, v in overrides.items() if k not in groups}
        split.append((preset, choices, values))
    state = conf_state(conf_dir)
    missing = list(dict.fromkeys((preset, choices) for preset, choices, _ in split
                                 if (state, preset, choices) not in _COMPOSED))
    if missing:
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
                for preset, choices in missing:
                    items = ([f"experiment={preset}"] if preset else []) + override_list(dict(choices))
                    _COMPOSED[(state, preset, choices)] = compose(config_name="config", overrides=items)
        finally:
            GlobalHydra.instance().clear()
    out = []
    for preset, choices, values in split:
        cfg = copy.deepcopy(_COMPOSED[(state, preset, choices)])
        for key, value in values.items():
            if OmegaConf.select(cfg, key, default=_ABSENT) is _ABSENT:
                raise ValueError(f"override {key}={override_value(value)}: no such key in the composed config "
                                 f"(experiment={preset}); check conf/ for the key's name")
            OmegaConf.update(cfg, key, value, merge=False)
        out.append(to_container(cfg))
    return out


def compose_config(preset: str | None, overrides: Mapping[str, Any], conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """The resolved config of one `experiment=<preset> <overrides>` (nested)."""
    return compose_configs([(preset, overrides)], conf_dir)[0]


def identity(flat_config: Mapping[str, Any]) -> dict[str, Any]:
    """The config values that must agree for a run to count as this setting."""
    return {k: v for k, v in flat_config.items() if k.split(".")[0] not in NON_IDENTITY_KEYS and k not in NON_IDENTITY_KEYS}


def _package_neutral(text: str) -> str:
    """Paths into the package compare equal across checkouts: ``<any>/dllm_bench/<rest>`` -> ``<dllm_bench>/<rest>``
    when ``<rest>`` exists in this checkout's package (runs.csv files travel with the repo)."""
    text = text.replace(str(PACKAGE_DIR), "<dllm_bench>")
    if "/dllm_bench/" in text and not text.startswith("<dllm_bench>"):
        rest = text.rsplit("/dllm_bench/", 1)[1]
        if rest and (PACKAGE_DIR / rest).exists():
            return "<dllm_bench>/" + rest
    return text


def same_value(cell: str, expected: Any) -> bool:
    """Whether a runs.csv text field holds the config value `expected` (numbers compared as numbers)."""
    cell = "" if cell is None or (isinstance(cell, float) and math.isnan(cell)) else str(cell).strip()
    if expected is None:
        return cell in ("", "None", "null")
    if isinstance(expected, bool):
        return cell.lower() == str(expected).lower()
    if isinstance(expected, (int, float)):
        try:
            return math.isclose(float(cell), float(expected), rel_tol=1e-9, abs_tol=1e-12)
        except ValueError:
            return False
    return _package_neutral(cell) == _package_neutral(str(expected))


def read_runs(paths: Iterable[Path | str]) -> pd.DataFrame:
    """Concatenate runs.csv files as text (values compared exactly), old key spellings read under their new names
    (runner/renames.py); `source` names each row's file."""
    frames = []
    for path in paths:
        path = Path(path)
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        frame["source"] = str(path)
        frames.append(frame)
    if not frames:
        return pd.DataFrame()
    union = set().union(*(f.columns for f in frames))
    for frame in frames:  # a key another file records but this one does not: not compared for its rows
        frame[ABSENT_COLUMN] = "|".join(sorted(union - set(frame.columns)))
    return rename_columns(pd.concat(frames, ignore_index=True, sort=False).fillna(""))


def rename_columns(runs: pd.DataFrame) -> pd.DataFrame:
    """runs.csv rows written under old spellings, read under the new ones (a row's value moves to the new
    column where its option is the renamed one; other options' rows keep theirs)."""
    runs = runs.copy()
    for r in RENAMED_KEYS:
        old, new, name = f"{r.group}.{r.old}", f"{r.group}.{r.new}", f"{r.group}.name"
        if old not in runs.columns or name not in runs.columns:
            continue
        # read_runs reads text ("" = empty); pandas' own reader numbers (NaN)
        text = pd.api.types.is_string_dtype(runs[old]) or runs[old].dtype == object
        rows = (runs[name] == r.option) & runs[old].notna() & (runs[old].astype(str) != "")
        if not rows.any():
            continue
        if new not in runs.columns:
            runs[new] = "" if text else float("nan")
        runs.loc[rows, new] = runs.loc[rows, old]
        runs.loc[rows, old] = "" if text else float("nan")
    return runs


def find_runs_csv(results_dir: Path | str) -> list[Path]:
    """Every `<results_dir>/<name>/runs.csv` (one level deep, as the runner writes them)."""
    root = Path(results_dir)
    return sorted(root.glob("*/runs.csv")) if root.is_dir() else []


def same_backend(runs: pd.DataFrame, config: Mapping[str, Any]) -> pd.Series:
    """Rows generated as the cell says (`backend` is not an identity key: a served run's id holds its server):
    a local cell takes local rows only (no `backend.name`), a served cell only rows of its backend, and of the
    model the server reported (`server_model`) where the cell names `backend.model`; not by URL, so a table can be
    filled from several servers (one per decoding setting). A served table is never filled by local runs, nor a
    local one by a server's."""
    backend = config.get("backend") or {}
    name = str(backend.get("name") or "local")
    mask = _column(runs, "backend.name").map(lambda v: v or "local") == name
    if name != "local" and backend.get("model") is not None:
        mask &= _column(runs, "server_model") == str(backend["model"])
    return mask


def _column(runs: pd.DataFrame, key: str) -> pd.Series:
    """A runs.csv column as stripped text ("" where absent or empty)."""
    if key not in runs.columns:
        return pd.Series("", index=runs.index)
    return runs[key].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v))
                         or str(v).strip() in ("nan", "None") else str(v).strip())


def matching_rows(runs: pd.DataFrame, config: Mapping[str, Any]) -> pd.DataFrame:
    """Rows whose every identity value equals the cell's; keys absent from runs.csv (from a row's own file, when
    several are read together) are not compared, except `REQUIRED_KEYS` (a file without them cannot hold this
    setting)."""
    if runs.empty or any(key not in runs.columns for key in REQUIRED_KEYS):
        return runs.iloc[0:0]  # written under another config schema (e.g. before policy x rule): never a match
    mask = same_backend(runs, config)
    absent = runs[ABSENT_COLUMN].map(lambda text: set(text.split("|"))) if ABSENT_COLUMN in runs.columns else None
    for key, expected in identity(flatten(dict(config))).items():
        if key not in runs.columns:
            continue
        same = runs[key].map(lambda cell, e=expected: same_value(cell, e))
        mask &= same if absent is None or key in REQUIRED_KEYS else same | absent.map(lambda keys, k=key: k in keys)
        if not mask.any():
            break
    return runs[mask]
