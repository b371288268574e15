"""Images of MathVista / MathVerse documents: local folder, decoded values, hub datasets (via a local parquet)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from llada_v_images import write_png
from PIL import Image

from dllm_bench.tasks.images import (
    DocImages,
    HubImages,
    ImageError,
    decode_image,
    mathverse_key,
    mathvista_key,
)

DATA = Path(__file__).parent.parent / "fixtures" / "tasks" / "mathvista" / "testmini.json"


def test_local_root_with_images_zip_layout(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    write_png(tmp_path / "images" / "1.png", 30, 20, seed=0)
    doc = {"sample_id": "mathvista/1", "pid": "1", "image": "images/1.png"}
    [img] = DocImages(tmp_path)(doc)
    assert img.size == (30, 20) and img.mode == "RGB"
    [img] = DocImages(tmp_path / "images")(doc)  # root pointing at the images folder itself
    assert img.size == (30, 20)
    absolute = {**doc, "image": str(tmp_path / "images" / "1.png")}
    assert DocImages()(absolute)[0].size == (30, 20)


def test_text_only_and_decoded_values(tmp_path: Path) -> None:
    loader = DocImages()
    assert loader({"sample_id": "mathverse/5", "image": ""}) == []
    assert loader({"sample_id": "mathverse/5", "image": None}) == []
    rgba = Image.new("RGBA", (5, 4), (255, 0, 0, 128))
    assert loader({"image": rgba})[0].mode == "RGB"
    buf = io.BytesIO()
    rgba.save(buf, format="PNG")
    assert decode_image({"bytes": buf.getvalue(), "path": None}).size == (5, 4)
    assert decode_image(buf.getvalue()).mode == "RGB"
    with pytest.raises(ImageError, match="cannot decode an image from a int"):
        decode_image(3)


def test_missing_image_names_the_document_and_paths(tmp_path: Path) -> None:
    doc = {"sample_id": "mathvista/7", "pid": "7", "image": "images/7.jpg"}
    with pytest.raises(ImageError, match=r"mathvista/7: image 'images/7.jpg' not found \(tried images/7.jpg, .*7.jpg\)"):
        DocImages(tmp_path)(doc)
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "7.jpg").write_text("not an image")
    with pytest.raises(ImageError, match="is not a readable image"):
        DocImages(tmp_path)(doc)
    with pytest.raises(ImageError, match="is not a directory"):
        DocImages(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="task 'gsm8k' has no image source"):
        DocImages.for_task("gsm8k")


def test_hub_dataset_lookup_by_key(tmp_path: Path) -> None:
    """The hub path (datasets.load_dataset, image column cast to undecoded, lookup by key) on a local parquet."""
    import datasets

    images = [Image.new("RGB", (8 + i, 6), (i * 40, 0, 0)) for i in range(3)]
    ds = datasets.Dataset.from_dict({"pid": ["1", "2", "3"], "decoded_image": images})
    ds = ds.cast_column("decoded_image", datasets.Image())
    ds.to_parquet(str(tmp_path / "testmini.parquet"))
    hub = HubImages("parquet", None, "train", "pid", "decoded_image", mathvista_key,
                    data_files=str(tmp_path / "testmini.parquet"))
    loader = DocImages(tmp_path, hub)
    [img] = loader({"sample_id": "mathvista/2", "pid": "2", "image": "images/2.jpg"})  # not on disk: hub
    assert img.size == (9, 6) and img.getpixel((0, 0)) == (40, 0, 0)
    with pytest.raises(ImageError, match="mathvista/9: image 'images/9.jpg' not found"):
        loader({"sample_id": "mathvista/9", "pid": "9", "image": "images/9.jpg"})
    bad = HubImages("parquet", None, "train", "pid", "image", mathvista_key, data_files=str(tmp_path / "testmini.parquet"))
    with pytest.raises(ImageError, match="has no column 'image'"):
        DocImages(None, bad)({"pid": "1", "image": "images/1.jpg"})


def test_mathverse_key_from_sample_id() -> None:
    assert mathverse_key({"sample_id": "mathverse/42"}) == "42"
    assert mathverse_key({"sample_index": 7, "sample_id": "x"}) == "7"


def test_real_mathvista_rows_with_synthetic_images(tmp_path: Path) -> None:
    """Real testmini rows through the tasks layer; synthetic PNGs at each row's published size."""
    from dllm_bench.tasks import get_task

    rows = json.loads(DATA.read_text())
    for pid in list(rows)[:3]:
        meta = rows[pid]["metadata"]
        path = tmp_path / rows[pid]["image"]
        path.parent.mkdir(exist_ok=True)
        write_png(path, meta["img_width"] // 8, meta["img_height"] // 8, seed=int(pid))
    task = get_task("mathvista", data_dir=str(DATA.parent), image_root=str(tmp_path), limit=3)
    loader = DocImages.for_task("mathvista", use_hub=False)
    for doc in task.docs():
        [img] = loader(doc)
        meta = rows[doc["pid"]]["metadata"]
        assert img.size == (meta["img_width"] // 8, meta["img_height"] // 8)
