"""Images of MathVista / MathVerse documents: from a local folder (offline) or the hub datasets.

A document's ``image`` field (set by :mod:`dllm_bench.tasks.mathvista` / :mod:`~dllm_bench.tasks.mathverse`)
is a relative path such as ``images/1.jpg`` (the layout of the datasets' ``images.zip``), an absolute path,
an already decoded image, or empty for a text-only problem. :class:`DocImages` turns it into PIL images:

- ``image_root``: the folder the ``images.zip`` was extracted into (``images/1.jpg`` is looked up as
  ``image_root/images/1.jpg``, then ``image_root/1.jpg``);
- ``hub``: a :class:`HubImages` (``AI4Math/MathVista`` ``decoded_image`` by ``pid``; ``AI4Math/MathVerse``
  ``image`` by ``sample_index``), read once and indexed, used when no local file has the image.

Images are returned in RGB, as the published evaluation (lmms-eval) converts them.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image


class ImageError(ValueError):
    """A document's image cannot be found or decoded; the message names the document and what was tried."""


def decode_image(value: Any) -> Image.Image:
    """A PIL image in RGB from a PIL image, raw bytes, a ``{"bytes", "path"}`` dict (datasets' Image) or a path."""
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, bytes | bytearray):
        return Image.open(io.BytesIO(value)).convert("RGB")
    if isinstance(value, dict) and (value.get("bytes") or value.get("path")):
        return decode_image(value["bytes"] if value.get("bytes") else Path(value["path"]))
    if isinstance(value, str | Path):
        with Image.open(value) as im:
            return im.convert("RGB")
    raise ImageError(f"cannot decode an image from a {type(value).__name__}; expected a PIL image, bytes, a path or "
                     "a datasets Image dict")


def mathvista_key(doc: dict) -> str:
    return str(doc["pid"])


def mathverse_key(doc: dict) -> str:
    """MathVerse rows are keyed by ``sample_index``; docs carry it in ``sample_id`` (``mathverse/<index>``)."""
    if "sample_index" in doc:
        return str(doc["sample_index"])
    return str(doc["sample_id"]).split("/", 1)[-1]


@dataclass
class HubImages:
    """One image column of a hub dataset split, indexed by a key column; loaded on first use."""

    path: str
    name: str | None
    split: str
    key_column: str
    image_column: str
    doc_key: Callable[[dict], str]
    data_files: str | None = None  # for a local parquet/json copy loaded through the same code path
    _index: dict[str, int] | None = None
    _rows: Any = None

    def get(self, doc: dict) -> Image.Image | None:
        if self._index is None:
            self._index = self._load()
        row = self._index.get(self.doc_key(doc))
        return None if row is None else decode_image(self._rows[row][self.image_column])

    def _load(self) -> dict[str, Any]:
        import datasets

        kwargs = {"data_files": self.data_files} if self.data_files else {}
        try:
            ds = datasets.load_dataset(self.path, self.name, split=self.split, **kwargs)
        except Exception as e:  # offline, unknown repo, renamed split
            raise ImageError(
                f"could not load images from {self.path}" + (f"/{self.name}" if self.name else "")
                + f" split {self.split!r} ({type(e).__name__}: {e}); offline, pass image_root=<folder with the "
                "extracted images.zip>"
            ) from e
        missing = [c for c in (self.key_column, self.image_column) if c not in ds.column_names]
        if missing:
            raise ImageError(f"{self.path} split {self.split!r} has no column {missing[0]!r}; columns: {ds.column_names}")
        self._rows = ds.cast_column(self.image_column, datasets.Image(decode=False))  # decode only what is asked
        return {str(k): i for i, k in enumerate(ds[self.key_column])}


def mathvista_hub(split: str = "testmini") -> HubImages:
    """``AI4Math/MathVista``: column ``decoded_image`` by ``pid``."""
    return HubImages("AI4Math/MathVista", None, split, "pid", "decoded_image", mathvista_key)


def mathverse_hub(split: str = "testmini") -> HubImages:
    """``AI4Math/MathVerse`` (config ``testmini``): column ``image`` by ``sample_index``."""
    return HubImages("AI4Math/MathVerse", "testmini", split, "sample_index", "image", mathverse_key)


HUB_SOURCES = {"mathvista": mathvista_hub, "mathverse": mathverse_hub}


class DocImages:
    """Callable ``doc -> list[PIL.Image]`` (empty for a text-only document); see the module docstring."""

    def __init__(self, image_root: str | Path | None = None, hub: HubImages | None = None) -> None:
        if image_root is not None and not Path(image_root).is_dir():
            raise ImageError(f"image_root {str(image_root)!r} is not a directory (expected the extracted images.zip)")
        self.image_root = Path(image_root) if image_root is not None else None
        self.hub = hub

    @classmethod
    def for_task(cls, task_name: str, image_root: str | Path | None = None, use_hub: bool = True) -> DocImages:
        """The image source of a benchmark: ``image_root`` first, then its hub dataset when ``use_hub``."""
        if task_name not in HUB_SOURCES:
            raise ValueError(f"task {task_name!r} has no image source; allowed: {sorted(HUB_SOURCES)}")
        return cls(image_root, HUB_SOURCES[task_name]() if use_hub else None)

    def candidates(self, relative: str) -> list[Path]:
        """Local paths tried for an ``image`` field, in order."""
        path = Path(relative)
        out = [path]
        if self.image_root is not None and not path.is_absolute():
            out += [self.image_root / path, self.image_root / path.name]
        return out

    def __call__(self, doc: dict) -> list[Image.Image]:
        value = doc.get("image")
        if value is None or (isinstance(value, str) and not value.strip()):
            return []
        if not isinstance(value, str | Path):
            return [decode_image(value)]
        tried = self.candidates(str(value))
        for path in tried:
            if path.is_file():
                try:
                    return [decode_image(path)]
                except (OSError, Image.UnidentifiedImageError) as e:
                    raise ImageError(f"{doc.get('sample_id', '?')}: {path} is not a readable image ({e})") from e
        if self.hub is not None:
            image = self.hub.get(doc)
            if image is not None:
                return [image]
        where = ", ".join(str(p) for p in tried) + (f", {self.hub.path}" if self.hub is not None else "")
        raise ImageError(
            f"{doc.get('sample_id', '?')}: image {str(value)!r} not found (tried {where}); pass image_root=<folder "
            "with the extracted images.zip> or allow the hub dataset"
        )
