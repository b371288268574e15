"""What a run's numbers depend on beyond its configuration: the code, the data, the checkpoint's other files and
the documents it selects. Each part is a short digest; together with the config they make the run id, so a rerun
after any of them changed starts a new run instead of serving the old rows (docs/runner.md, "Run identity")."""

from __future__ import annotations

import hashlib
import json
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from dllm_bench.models.lora import checkpoint_of
from dllm_bench.runner.config import PACKAGE_DIR
from dllm_bench.runner.run_config import RunConfig
from dllm_bench.tasks import Task

# Package folders that cannot change a run's rows: the report builders read results, the trackers send finished
# rows; the tiny checkpoints are weights, covered by `model.fingerprint`.
NOT_CODE = ("report", "tracking", "tiny/checkpoints")
CODE_SUFFIXES = (".py", ".json", ".jsonl", ".yaml")
# Files beside the weights that shape prompts and decoding (`model.fingerprint` covers config.json and weights).
CHECKPOINT_TEXT_PREFIXES = ("tokenizer", "special_tokens_map", "generation_config", "chat_template", "vocab", "merges")
# The parts of an identity, in the order a change is reported.
PARTS = ("code", "data", "weights", "tokenizer", "selection", "backend")


def _short(digest: Any) -> str:
    return digest.hexdigest()[:16]


def code_files(package: Path = PACKAGE_DIR) -> list[Path]:
    """The package's source and data files that decode, score or load (not the report builders, not weights)."""
    out = []
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package).as_posix()
        if (path.is_file() and path.suffix in CODE_SUFFIXES and "__pycache__" not in rel
                and not any(rel == p or rel.startswith(p + "/") for p in NOT_CODE)):
            out.append(path)
    return out


@lru_cache(maxsize=4)
def _code_digest_cached(package: str, stamps: tuple) -> str:
    digest = hashlib.sha256()
    root = Path(package)
    for rel, _, _ in stamps:
        digest.update(f"{rel}\0".encode())
        digest.update((root / rel).read_bytes())
        digest.update(b"\0")
    return _short(digest)


def code_digest(package: Path = PACKAGE_DIR) -> str:
    """Digest of every code file's path (relative to the package) and content: the same in every checkout."""
    stamps = tuple((p.relative_to(package).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
                   for p in code_files(package))
    return _code_digest_cached(str(package), stamps)


def package_dirty(package: Path = PACKAGE_DIR) -> bool | None:
    """Whether the package's tracked files differ from the checkout's HEAD (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."], cwd=package,
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.strip())


def data_digest(task: Task, docs: list[dict]) -> str:
    """Digest of the documents a run reads (every row of the split, as parsed) and of the few-shot pool its
    prompts draw from: an edited puzzle, question or test changes it, a re-saved file with the same rows does not."""
    digest = hashlib.sha256(json.dumps(docs, sort_keys=True, default=str, ensure_ascii=False).encode())
    pool = getattr(task, "fewshot_pool", None)
    if callable(pool) and task.num_fewshot > 0:
        digest.update(json.dumps(pool(), sort_keys=True, default=str, ensure_ascii=False).encode())
    return _short(digest)


def tokenizer_digest(name_or_path: str) -> str | None:
    """Digest of a local checkpoint's tokenizer and generation files (None for a hub id)."""
    directory = Path(checkpoint_of(name_or_path)).expanduser()  # an adapter's: its base's
    if not directory.is_dir():
        return None
    digest = hashlib.sha256()
    for f in sorted(directory.iterdir()):
        if f.is_file() and f.name.startswith(CHECKPOINT_TEXT_PREFIXES):
            digest.update(f"{f.name}\0".encode())
            digest.update(f.read_bytes())
    return _short(digest)


def run_identity(run: RunConfig, task: Task, docs: list[dict]) -> dict[str, Any]:
    """The parts of a run's identity beyond its config (`run.fingerprint` set already); a served run adds its
    backend, URL and the model its server reports (`served.server_identity`), a local run nothing."""
    served = {}
    if run.backend is not None:
        from dllm_bench.runner.served import server_identity

        served = {"backend": server_identity(run)}
    return {
        "code": code_digest(),
        "data": data_digest(task, docs),
        "weights": run.fingerprint,
        "tokenizer": tokenizer_digest(run.model.name_or_path),
        "selection": {"offset": int(run.offset), "limit": run.limit},
        **served,
    }


def identity_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two identities, one phrase per part (`code 1a2b… -> 3c4d…`)."""
    changes = []
    for part in PARTS:
        if old.get(part) != new.get(part):
            changes.append(f"{part} {old.get(part)} -> {new.get(part)}")
    return changes
