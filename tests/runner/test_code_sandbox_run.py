"""Code tasks in a run: the sandbox refuses before any model is loaded, the opt-in key is real, and every
sample records the isolation its program got and the sandbox's verdict (runs.csv counts them)."""

from __future__ import annotations

import pytest

from dllm_bench.runner.execute import execute
from dllm_bench.runner.store import read_jsonl
from dllm_bench.runner.validate import ConfigError
from dllm_bench.tasks import get_task, sandbox


def no_engine(c, ctx):
    raise AssertionError("a refused run must not load a model")


def test_a_run_refuses_before_loading_a_model_and_names_the_opt_in_key(compose_cfg, llada_overrides, monkeypatch):
    monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "bwrap failed: simulated")
    cfg = compose_cfg(*llada_overrides, "task=humaneval", "limit=1")
    with pytest.raises(ConfigError, match="task.allow_unisolated=true") as err:
        execute(cfg, engine_factory=no_engine)
    assert "simulated" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("unavailable", [False, True])
def test_each_sample_records_its_isolation(compose_cfg, llada_overrides, monkeypatch, tmp_path, unavailable):
    if unavailable:
        monkeypatch.setattr(sandbox, "isolation_unavailable_reason", lambda: "simulated")
    overrides = ["task=humaneval", "limit=2", "gen_length=8", "block_length=8", "batch_size=2", "warmup=0",
                 f"name=iso{int(unavailable)}"]
    row = execute(compose_cfg(*llada_overrides, *overrides, f"task.allow_unisolated={str(unavailable).lower()}"))
    (run,) = [p for p in (tmp_path / "results" / f"iso{int(unavailable)}").iterdir() if p.is_dir()]
    rows = read_jsonl(run / "samples.jsonl")
    assert row["n_samples"] == 2 and len(rows) == 2
    assert {r["isolation"] for r in rows} == {"rlimits+audit" if unavailable else "bwrap"}
    assert all(r["sandbox_status"] in sandbox.STATUSES and "\n" not in r["sandbox_reason"] for r in rows)
    assert all(r["correct"] == (r["sandbox_status"] == "passed") for r in rows)
    assert sum(row[f"sandbox_{s}"] for s in sandbox.STATUSES) == 2


@pytest.mark.parametrize(("options", "match"), [
    ({"timeout_s": 0}, "timeout_s=0"), ({"timeout_s": "10"}, "timeout_s='10'"),
    ({"allow_unisolated": "yes"}, "allow_unisolated='yes'"),
])
def test_bad_sandbox_options_are_named(options, match):
    for name in ("humaneval", "mbpp"):
        with pytest.raises(ValueError, match=match):
            get_task(name, **options)
