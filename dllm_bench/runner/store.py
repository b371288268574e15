"""Resumable results store: append-only sample and timing rows (fsync'd; torn tails cut, corrupt lines set aside),
run.json and runs.csv; one writer per run folder (an exclusive lock for the run's life)."""

from __future__ import annotations

import csv
import errno
import fcntl
import gzip
import io
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dllm_bench.runner.summary import RUN_INFO_COLUMNS, SANDBOX_COLUMNS, SUMMARY_COLUMNS, TIMING_PASS_COLUMNS

log = logging.getLogger("dllm_bench.run")
LOCK_NAME = "run.lock"
BAD_SUFFIX = ".bad"


def _parse_row(line: bytes) -> dict[str, Any] | None:
    """The row a complete JSONL line holds, None when it is not one JSON object (a torn or fused write)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def _bad_lines(path: Path) -> tuple[list[bytes], list[tuple[int, bytes]]]:
    """(good lines, [(line number, bad line)]) of a JSONL file; a last line without its newline is bad."""
    good, bad = [], []
    data = path.read_bytes()
    for number, line in enumerate(data.splitlines(keepends=True), start=1):
        if not line.strip():
            continue
        if not line.endswith(b"\n") or _parse_row(line) is None:
            bad.append((number, line))
        else:
            good.append(line)
    return good, bad


def _repair(path: Path) -> None:
    """Set aside the lines of a JSONL file that are not rows (a torn last line left by a killed writer, a line
    fused from two writes) in `<file>.bad`, saying which; the file keeps its complete rows, whose documents
    are then not decoded again, and the others are. Called by the run folder's one writer only."""
    if not path.exists():
        return
    good, bad = _bad_lines(path)
    if not bad:
        return
    with open(path.with_name(path.name + BAD_SUFFIX), "ab") as f:
        f.writelines(line if line.endswith(b"\n") else line + b"\n" for _, line in bad)
    _atomic_write_bytes(path, b"".join(good))
    numbers = ", ".join(str(n) for n, _ in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
    log.warning("%s: line %s not a complete JSON row (a write cut short); set aside in %s%s, its documents run "
                "again", path, numbers, path.name, BAD_SUFFIX)


PACKED = ".gz"  # a finished run's samples/traces packed for the repository (`pack_run`)


def packed(path: Path) -> Path:
    """The packed form of a run file (``samples.jsonl`` -> ``samples.jsonl.gz``)."""
    return path.with_name(path.name + PACKED)


def stored(path: Path) -> Path | None:
    """The file holding a run file's rows: itself, else its packed form, else None."""
    return path if path.exists() else packed(path) if packed(path).exists() else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Complete rows of a JSONL file (or of its packed ``.gz`` form where only that exists); a torn last line is
    ignored, a corrupt line skipped with a warning naming the file and the line."""
    found = stored(path) if not path.name.endswith(PACKED) else path if path.exists() else None
    if found is None:
        return []
    path = found
    rows = []
    with (gzip.open(path, "rb") if path.name.endswith(PACKED) else open(path, "rb")) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            if not line.endswith(b"\n"):
                break
            row = _parse_row(line)
            if row is None:
                log.warning("%s: line %d is not a JSON row (a write cut short); skipped", path, number)
                continue
            rows.append(row)
    return rows


class RunLocked(RuntimeError):
    """Another process holds a run folder's lock (raised only when not waiting)."""


class RunLock:
    """An exclusive `flock` on `<run folder>/run.lock` for the life of one writer: a twin command waits for
    it, saying once whom it waits for; the kernel releases it when the holder dies, however it dies."""

    def __init__(self, run_dir: Path, rank: int = 0, wait: bool = True) -> None:
        self.path = run_dir / (LOCK_NAME if rank == 0 else f"{LOCK_NAME}.rank{rank}")
        self._file = None
        while self._file is None:
            run_dir.mkdir(parents=True, exist_ok=True)  # again: a holder that wrote nothing removes its folder
            f = open(self.path, "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "another process"
                if not wait:
                    f.close()
                    raise RunLocked(f"{run_dir} is being written by {holder}; wait for it or stop it") from None
                log.warning("%s is being written by %s: waiting for it to finish", run_dir, holder)
                fcntl.flock(f, fcntl.LOCK_EX)
            try:
                same = os.stat(self.path).st_ino == os.fstat(f.fileno()).st_ino
            except FileNotFoundError:  # the holder removed the folder's lock (a run that wrote nothing)
                same = False
            if not same:
                f.close()
                continue
            f.seek(0)
            f.truncate()
            f.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            f.flush()
            self._file = f

    def release(self) -> None:
        """Remove the lock file and let go (a waiter then sees the removal and locks afresh)."""
        if self._file is None:
            return
        self.path.unlink(missing_ok=True)
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()
        self._file = None


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError while writing `path` (disk full, read-only) names the file it could not write."""
    try:
        yield
    except OSError as err:
        if err.filename:
            raise
        raise OSError(err.errno, f"cannot write {path}: {err.strerror or err}") from err


def _append_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append rows in one write, then flush and fsync so a finished row survives a kill."""
    text = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    if not text:
        return
    with _naming(path), open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` by `data` atomically; nothing is written when it holds `data` already (a rerun that
    changed nothing leaves committed results as they are)."""
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with _naming(path), open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def _atomic_write_text(path: Path, text: str) -> None:
    _atomic_write_bytes(path, text.encode("utf-8"))


def schema_order(columns: Iterable[str]) -> list[str]:
    """runs.csv columns in schema order whatever order runs arrive in: run_id, name, the config keys sorted,
    the summary columns, the sandbox verdict counts, the batch-1 timing pass's, then the run's bookkeeping (each only where present)."""
    present = set(columns)
    after = (*SUMMARY_COLUMNS, *SANDBOX_COLUMNS, *TIMING_PASS_COLUMNS, *RUN_INFO_COLUMNS)
    config = sorted(present - {"run_id", "name", *after})
    tail = [c for c in after if c in present]
    return [c for c in ("run_id", "name") if c in present] + config + tail


@contextmanager
def _locked(path: Path):
    """Exclusive advisory lock on `path.lock` (parallel sweep jobs share one runs.csv)."""
    lock = path.with_name(path.name + ".lock")
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class ResultsStore:
    """Files of one run under `<output_dir>/<name>/<run_id>/`, written by one rank of `world_size`, which holds
    the folder's lock from here until `close` (a twin command waits for it)."""

    def __init__(self, output_dir: str | Path, name: str, run_id: str, rank: int = 0, world_size: int = 1,
                 wait: bool = True):
        self.experiment_dir = Path(output_dir) / name
        self.run_dir = self.experiment_dir / run_id
        self.run_id, self.rank, self.world_size = run_id, rank, world_size
        self._created = [p for p in (self.experiment_dir, self.run_dir) if not p.exists()]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(self.run_dir, os.W_OK):  # before any weights are read
            raise PermissionError(errno.EACCES, "the results folder is not writable", str(self.run_dir))
        suffix = "" if world_size == 1 else f".rank{rank}"
        self.samples_path = self.run_dir / "samples.jsonl"
        self.traces_path = self.run_dir / "traces.jsonl"
        self.own_samples = self.run_dir / f"samples{suffix}.jsonl"
        self.own_traces = self.run_dir / f"traces{suffix}.jsonl"
        self.timing_path = self.run_dir / "timing.jsonl"  # the batched mode's batch-1 pass (timing_docs)
        self.own_timing = self.run_dir / f"timing{suffix}.jsonl"
        self.run_json = self.run_dir / "run.json"
        self.runs_csv = self.experiment_dir / "runs.csv"
        self.lock = RunLock(self.run_dir, rank, wait)
        for path in {self.own_samples, self.own_traces, self.own_timing, *([self.samples_path, self.traces_path,
                                                                            self.timing_path] if rank == 0 else [])}:
            _repair(path)

    def close(self) -> None:
        """Let go of the run folder (the next writer may start)."""
        self.lock.release()

    def pending_shards(self) -> bool:
        """Whether rank files wait to be merged (a data-parallel run decoded rows since the last merge)."""
        return any(any(self.run_dir.glob(f"{kind}.rank*.jsonl")) for kind in ("samples", "traces", "timing"))

    def discard_if_empty(self) -> None:
        """Remove the folders this store created while they hold no row (a run that failed before its first
        row was written, e.g. on a full disk: its own sample files are then empty or torn)."""
        for own in (self.own_samples, self.own_traces, self.own_timing):
            if own.exists() and not read_jsonl(own):
                own.unlink()
        self.close()
        for path in reversed(self._created):
            try:
                path.rmdir()
            except OSError:  # not empty (rows were written, or another run shares the experiment folder)
                return

    def _sample_files(self) -> list[Path]:
        return [self.samples_path, packed(self.samples_path), *sorted(self.run_dir.glob("samples.rank*.jsonl"))]

    def finished_ids(self) -> set[str]:
        """Sample ids with a complete row in any sample file of this run (any earlier world size)."""
        return {str(row["sample_id"]) for path in self._sample_files() for row in read_jsonl(path)}

    def _timing_files(self) -> list[Path]:
        return [self.timing_path, *sorted(self.run_dir.glob("timing.rank*.jsonl"))]

    def timed_ids(self) -> set[str]:
        """Sample ids with a complete batch-1 timing row (any earlier world size)."""
        return {str(row["sample_id"]) for path in self._timing_files() for row in read_jsonl(path)}

    def timing_rows(self) -> list[dict[str, Any]]:
        """The batch-1 timing rows, each sample once (after `merge`: timing.jsonl in document order)."""
        rows: dict[str, dict[str, Any]] = {}
        for path in self._timing_files():
            for row in read_jsonl(path):
                rows.setdefault(str(row["sample_id"]), row)
        return sorted(rows.values(), key=lambda r: (r["doc_index"], str(r["sample_id"])))

    def append_timing(self, rows: list[dict[str, Any]]) -> None:
        _append_jsonl(self.own_timing, rows)

    def append_samples(self, rows: list[dict[str, Any]]) -> None:
        _append_jsonl(self.own_samples, rows)

    def append_traces(self, rows: list[dict[str, Any]]) -> None:
        _append_jsonl(self.own_traces, rows)

    def merge(self) -> list[dict[str, Any]]:
        """Rank 0: fold every sample (trace, timing) file into samples.jsonl (traces.jsonl, timing.jsonl) in document
        order, each sample once. A packed run with nothing new is left as it is (a rerun rewrites no file); one that
        gained rows is folded back into plain files."""
        if packed(self.samples_path).exists() and not self.samples_path.exists() and not self.pending_shards():
            return read_jsonl(self.samples_path)
        rows: dict[str, dict[str, Any]] = {}
        for path in self._sample_files():
            for row in read_jsonl(path):
                rows.setdefault(str(row["sample_id"]), row)
        ordered = sorted(rows.values(), key=lambda r: (r["doc_index"], str(r["sample_id"])))
        _atomic_write_text(self.samples_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ordered))
        traces: dict[str, dict[str, Any]] = {}
        for path in [self.traces_path, packed(self.traces_path), *sorted(self.run_dir.glob("traces.rank*.jsonl"))]:
            for row in read_jsonl(path):
                traces.setdefault(str(row["sample_id"]), row)
        if traces:
            trace_rows = sorted(traces.values(), key=lambda r: (r.get("doc_index", 0), str(r["sample_id"])))
            _atomic_write_text(self.traces_path, "".join(json.dumps(r) + "\n" for r in trace_rows))
        timing = self.timing_rows()
        if timing:
            _atomic_write_text(self.timing_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in timing))
        for pattern in ("samples.rank*.jsonl", "traces.rank*.jsonl", "timing.rank*.jsonl", f"*.jsonl{PACKED}"):
            for path in self.run_dir.glob(pattern):
                path.unlink()
        return ordered

    def read_run_json(self) -> dict[str, Any]:
        return json.loads(self.run_json.read_text()) if self.run_json.exists() else {}

    def write_run_json(self, info: dict[str, Any]) -> None:
        _atomic_write_text(self.run_json, json.dumps(info, indent=2, default=str) + "\n")

    def upsert_runs_csv(self, row: dict[str, Any]) -> None:
        """Replace this run's row of runs.csv (or add it); columns are the union over all runs, in schema order."""
        with _locked(self.runs_csv):
            rows = []
            if self.runs_csv.exists():
                with open(self.runs_csv, newline="", encoding="utf-8") as f:
                    rows = [r for r in csv.DictReader(f) if r.get("run_id") != self.run_id]
            rows.append({k: "" if v is None else v for k, v in row.items()})
            columns = schema_order(k for r in rows for k in r)
            rows.sort(key=lambda r: str(r.get("run_id")))
            text = io.StringIO(newline="")
            writer = csv.DictWriter(text, fieldnames=columns, restval="")
            writer.writeheader()
            writer.writerows(rows)
            _atomic_write_text(self.runs_csv, text.getvalue())


def pack_run(run_dir: Path) -> int:
    """Pack a finished run's samples.jsonl and traces.jsonl into ``.gz`` files (bytes fixed by their content: no
    name or time in the header), for per-sample results kept in the repository; returns the bytes saved. A run with
    shards still to merge is left alone. Every reader takes either form."""
    if any(run_dir.glob("*.rank*.jsonl")) or not (run_dir / "run.json").exists():
        return 0
    saved = 0
    for name in ("samples.jsonl", "traces.jsonl"):
        plain = run_dir / name
        if not plain.exists():
            continue
        data = plain.read_bytes()
        buffer = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=buffer, mtime=0) as f:
            f.write(data)
        _atomic_write_bytes(packed(plain), buffer.getvalue())
        plain.unlink()
        saved += len(data) - len(buffer.getvalue())
    return saved
