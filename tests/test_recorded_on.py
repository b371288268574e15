"""Every golden says where it was recorded (tests/fixtures/recorded_on.json), the ``golden`` marker follows the
goldens a test reads, and the comparisons made on another machine run and hold here too (issue 36)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dllm_bench.machine import FOREIGN_ENV, fingerprint, foreign
from tests.conftest import golden_definitions
from tests.machine import (
    MANIFEST,
    assert_within_ulps,
    clear_argmax,
    golden_names,
    recording,
    row_ulps,
    spacing,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
# the tests whose assertions differ on another machine (logits within ulps), run there by the slow test below
PORTABLE = ["tests/models/test_published_logits.py", "tests/models/test_moe.py::test_logits_equal_the_published_code_bit_for_bit",
            "tests/models/test_moe.py::test_float32_rotation_switch_is_wired",
            "tests/models/test_linear.py::test_rows_equal_f_linear_over_a_full_canvas_from_twelve_rows",
            "tests/models/test_linear.py::test_batched_and_strided_inputs_take_the_rows_product",
            "tests/decoding/test_gpu_check.py::test_a_cpu_compares_every_row_where_recorded_and_the_near_tie_free_ones_elsewhere"]

pytestmark = pytest.mark.fast


def test_every_fixture_is_in_the_manifest_and_every_golden_is_read():
    files = {p.name for p in FIXTURES.iterdir() if p.suffix in (".json", ".safetensors") and p != MANIFEST}
    listed = {n for n in golden_names() if not n.startswith("claim:")}
    assert files == listed, f"unlisted: {sorted(files - listed)}, listed but absent: {sorted(listed - files)}"
    sources = [p.read_text() for p in [*ROOT.joinpath("tests").rglob("test_*.py")]]
    for name in golden_names():
        assert any(name in src for src in sources), f"{name}: no test reads it"


def test_manifest_machines_have_the_fingerprints_fields():
    manifest = json.loads(MANIFEST.read_text())
    assert all(set(m) == set(fingerprint()) for m in manifest["machines"].values())
    for name in golden_names():
        rec = recording(name)
        assert set(rec.kernel_widths) <= {"default", "avx2", "avx512"} and rec.kernel_widths


def test_the_foreign_switch_makes_every_golden_elsewhere(monkeypatch):
    monkeypatch.setenv(FOREIGN_ENV, "1")
    assert foreign() and fingerprint()["cpu"].startswith("foreign")
    for name in golden_names():
        assert not recording(name).here() and "cpu" in recording(name).mismatch()
    monkeypatch.setenv(FOREIGN_ENV, "yes")
    with pytest.raises(ValueError, match="allowed are 0 and 1"):
        fingerprint()


def test_the_golden_marker_follows_what_a_test_reads():
    """Definitions naming a golden, the helpers reading them and the tests calling those are golden; the rest of a
    golden's module is not."""
    logits = golden_definitions(ROOT / "tests" / "models" / "test_published_logits.py")
    assert {"FIXTURE", "GOLDEN", "_published", "test_default_logits_are_the_published_bits"} <= logits
    assert "test_rotation_precision_comes_from_the_checkpoint" not in logits
    speed = golden_definitions(ROOT / "tests" / "decoding" / "test_speed_equivalence.py")  # via speed_reference.py
    assert "test_tiny_checkpoints_decode_as_recorded" in speed


def test_ulps_are_counted_at_the_rows_largest_value():
    for dtype in (torch.float32, torch.bfloat16):
        want = torch.tensor([[-20.0, 0.0, 3.0], [1.0, -0.5, 0.25]], dtype=dtype)
        step = spacing(want.abs().amax(-1, keepdim=True))
        got = want + torch.tensor([[0.0, 3.0, 0.0], [0.0, 0.0, 2.0]], dtype=dtype) * step
        assert row_ulps(got, want) == 3.0  # 3 ulps of 20 on the value near 0, 2 ulps of 1 on the other row
        assert_within_ulps(got, want, "3 ulps")
        with pytest.raises(AssertionError, match="ulps apart"):
            assert_within_ulps(want + 200 * step, want, "200 ulps")


def test_an_argmax_is_clear_only_beyond_twice_the_bound():
    logits = torch.tensor([[10.0, 10.0 - 2**-15, 0.0], [10.0, 9.0, 0.0]])  # 2**-15 at 10: 16 float32 ulps
    assert clear_argmax(logits).tolist() == [False, True]


@pytest.mark.slow
def test_the_portable_assertions_hold_here_as_on_another_machine():
    """DLLM_BENCH_FOREIGN_MACHINE=1: the logit goldens compared within ulps and gpu_check's near-tie-free rows, run
    (not skipped) and passed on the recording machine."""
    env = {**os.environ, FOREIGN_ENV: "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *PORTABLE],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0 and " skipped" not in done.stdout, done.stdout[-3000:]
