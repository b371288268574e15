"""Without a network a hub dataset fails at once (no retry lines), and a cached one still loads offline."""

from __future__ import annotations

import logging

import datasets
import huggingface_hub.utils
import pytest
from huggingface_hub import constants

from dllm_bench.tasks import data
from dllm_bench.tasks.data import DataError, load_hub_rows

pytestmark = pytest.mark.fast  # the inner loop: make test-fast


class _NoNetwork:
    def head(self, *args, **kwargs):
        raise ConnectionError("Name or service not known")


def test_unreachable_hub_reads_the_cache_offline_once(monkeypatch, caplog):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: _NoNetwork())
    seen = []

    def load_dataset(*args, **kwargs):
        seen.append((constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE))
        raise FileNotFoundError("not cached")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    with caplog.at_level(logging.WARNING), pytest.raises(DataError) as err:
        load_hub_rows("openai/gsm8k", "main", "test")
    assert seen == [(True, True)] and constants.HF_HUB_OFFLINE is False
    assert "unreachable: ConnectionError, and not in the local cache" in str(err.value)
    assert "data_files=<file>" in str(err.value) and not caplog.records


def test_reachable_hub_is_asked_normally(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(data, "hub_unreachable", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: [{"q": constants.HF_HUB_OFFLINE}])
    assert load_hub_rows("x/y", None, "test") == [{"q": False}]
