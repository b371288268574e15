"""Full SHA-256 of (large) files, computed once per file version: cached by path, size, mtime and ctime.

A weight file of an 8B checkpoint takes tens of seconds to hash; the cache (a JSON file in the user's cache
folder, `DLLM_BENCH_DIGEST_CACHE` to move it) makes every later run read only its `stat`. ctime is part of the
key because no user tool can set it back: bytes rewritten in place with the old mtime restored still rehash.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

CACHE_ENV = "DLLM_BENCH_DIGEST_CACHE"
CHUNK = 8 << 20


def cache_path() -> Path:
    """The digest cache file: `$DLLM_BENCH_DIGEST_CACHE`, else `$XDG_CACHE_HOME/dllm_bench/file_digests.json`."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dllm_bench" / "file_digests.json"


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def sha256_of(path: Path) -> str:
    """SHA-256 of the whole file, read in chunks (no cache)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    """SHA-256 of the whole file; from the cache when path, size, mtime and ctime are those it was computed for."""
    path = Path(path).resolve()
    key, stamp = str(path), _stamp(path)
    cache = cache_path()
    entry = _read_cache(cache).get(key)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    value = sha256_of(path)
    if _stamp(path) != stamp:  # written while we read it: hash what is there now, cache nothing
        return sha256_of(path)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with open(cache.with_name(cache.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = _read_cache(cache)
            data[key] = {"stamp": stamp, "sha256": value}
            tmp = cache.with_name(f"{cache.name}.tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
            os.replace(tmp, cache)
    except OSError:  # a read-only home: the digest is still right, only not remembered
        pass
    return value
