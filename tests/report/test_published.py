"""The shipped published numbers are the checked reference copy, byte for byte."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from dllm_bench.report.published import PUBLISHED_CSV, decimals, load_published

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "published_results.csv"


def test_checksum_matches_the_source_note():
    note = (PUBLISHED_CSV.parent / "SOURCE.md").read_text(encoding="utf-8")
    expected = re.search(r"`published_results\.csv` \| `([0-9a-f]{64})`", note).group(1)
    assert hashlib.sha256(PUBLISHED_CSV.read_bytes()).hexdigest() == expected


@pytest.mark.skipif(not SHARED.is_file(), reason="the shared reference folder is not beside this checkout")
def test_identical_to_the_shared_reference():
    assert PUBLISHED_CSV.read_bytes() == SHARED.read_bytes()


def test_rows_keep_printed_precision():
    rows = load_published()
    assert len(rows) == 233
    t5 = [r for r in rows if r["paper"] == "fast-dllm-pp" and r["table"] == "Table 5"]
    assert t5[0]["accuracy"] == "78.33" and decimals(t5[0]["accuracy"]) == 2
    assert rows[0].number("nfe") is None and rows[0].integer("block_length") is None


def test_wrong_header_is_refused(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("paper,table\nfast-dllm,Table 1\n")
    with pytest.raises(ValueError, match="is not the published schema"):
        load_published(bad)
