"""report.runs composes a cell once per process: what it reuses must be what Hydra would compose now."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dllm_bench.decoding.rules import RULES
from dllm_bench.report.runs import compose_config
from dllm_bench.runner.config import CONF_DIR
from dllm_bench.runner.group_defaults import store_group_defaults


@pytest.fixture
def conf_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(CONF_DIR, tmp_path / "conf"))


def test_a_reused_config_is_a_copy(conf_copy):
    first = compose_config(None, {"rule": "threshold"}, conf_copy)
    first["rule"]["threshold"] = -1.0
    assert compose_config(None, {"rule": "threshold"}, conf_copy)["rule"]["threshold"] != -1.0


def test_an_edited_conf_file_composes_afresh(conf_copy):
    assert compose_config(None, {"rule": "factor"}, conf_copy)["gen_length"] != 77
    config = conf_copy / "config.yaml"
    config.write_text(config.read_text().replace("\ngen_length: 24 ", "\ngen_length: 77 ", 1))
    assert compose_config(None, {"rule": "factor"}, conf_copy)["gen_length"] == 77


def test_a_changed_registered_default_composes_afresh(conf_copy, monkeypatch):
    before = compose_config(None, {"rule": "threshold"}, conf_copy)["rule"]
    cls = RULES["threshold"]
    monkeypatch.setattr(cls.__dataclass_fields__["threshold"], "default", 0.123)
    store_group_defaults()
    try:
        assert compose_config(None, {"rule": "threshold"}, conf_copy)["rule"]["threshold"] == 0.123
    finally:
        monkeypatch.undo()
        store_group_defaults()
    assert compose_config(None, {"rule": "threshold"}, conf_copy)["rule"] == before
