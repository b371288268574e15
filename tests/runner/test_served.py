"""Served backends against a real server on the loopback: `python -m dllm_bench.serve` (a separate process) on
the embedded tiny LLaDA; `backend=sglang` and `backend=openai` give the local engine's tokens, verdicts and NFE,
and faults (HTTP 500s, a slow answer, a dropped connection, the server killed mid-run) end in retries or one line,
with a rerun completing the run and decoding nothing twice. docs/backends.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from dllm_bench.runner.config import CONF_DIR, REPO_DIR
from dllm_bench.runner.execute import execute
from dllm_bench.runner.served import BackendError, reported_nfe
from dllm_bench.runner.store import read_jsonl
from dllm_bench.runner.validate import ConfigError, validate_config

LIMIT = 6
STARTUP_S = 240
COMPARED = ("raw_completion", "completion", "extracted", "correct", "nfe", "steps", "tokens_cut", "tokens_nonstop",
            "tokens_canvas", "tokens_all", "tokens_cut_paper", "forward_positions")


def compose_config(*overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


class Server:
    """`python -m dllm_bench.serve --port 0` in its own process; `url` once it listens."""

    def __init__(self, *overrides: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
        self.proc = subprocess.Popen([sys.executable, "-m", "dllm_bench.serve", "--port", "0", "num_threads=1",
                                      *overrides],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                     cwd=REPO_DIR)
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(STARTUP_S)
        if not found or "http://" not in found[0]:
            self.stop()
            raise RuntimeError(f"dllm_bench.serve did not start within {STARTUP_S} s: {found}")
        self.url = found[0].split()[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


class QuietServer(ThreadingHTTPServer):
    """A server whose handler errors (a client that gave up on a slow answer: a broken pipe) print nothing."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass


class FaultProxy:
    """An HTTP proxy in this process in front of a server: GETs pass; each POST takes the next action of `plan`
    (`ok` forwards, `500` answers HTTP 500, `slow` waits `slow_s` then forwards, `drop` closes the connection
    unanswered, `kill` kills the server process and then forwards); `ok` once the plan is spent. A request the
    target does not answer (it is dead) is dropped."""

    def __init__(self, target: str, plan: list[str], slow_s: float = 2.0, server: Server | None = None) -> None:
        self.target, self.plan, self.slow_s, self.server = target, list(plan), slow_s, server
        self.posts: list[str] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self, body: bytes | None) -> None:
                req = urllib.request.Request(proxy.target + self.path, data=body, method=self.command,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=60) as answer:
                        data, status = answer.read(), answer.status
                except urllib.error.HTTPError as err:
                    data, status = err.read(), err.code
                except OSError:
                    self.close_connection = True
                    return
                self._answer(status, data)

            def _answer(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._forward(None)

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy.lock:
                    action = proxy.plan.pop(0) if proxy.plan else "ok"
                    proxy.posts.append(action)
                if action == "500":
                    self._answer(500, b'{"error": "injected"}')
                    return
                if action == "drop":
                    self.close_connection = True
                    return
                if action == "slow":
                    time.sleep(proxy.slow_s)
                if action == "kill" and proxy.server is not None:
                    proxy.server.stop()
                self._forward(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def proxy_to(server: Server) -> Iterator:
    made: list[FaultProxy] = []

    def make(plan: list[str], **kwargs) -> FaultProxy:
        made.append(FaultProxy(server.url, plan, **kwargs))
        return made[-1]

    yield make
    for p in made:
        p.close()


def run(out: Path, *overrides: str) -> dict:
    return execute(compose_config(f"output_dir={out}", "progress=false", "num_threads=1", "warmup=0",
                                  f"limit={LIMIT}", *overrides))


def served(url: str, name: str = "sglang", *extra: str) -> list[str]:
    return [f"backend={name}", f"backend.url={url}", "backend.backoff_s=0.01", *extra]


def samples(out: Path, row: dict) -> dict[str, dict]:
    return {r["sample_id"]: r for r in read_jsonl(out / "default" / row["run_id"] / "samples.jsonl")}


@pytest.fixture(scope="module")
def local_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The local engine, one document per batch (as the server decodes each request alone)."""
    out = tmp_path_factory.mktemp("local")
    return samples(out, run(out, "batch_size=1"))


def assert_same_as_local(rows: dict[str, dict], local_rows: dict[str, dict]) -> None:
    assert sorted(rows) == sorted(local_rows) and len(rows) == LIMIT
    for sid, row in rows.items():
        assert {k: row[k] for k in COMPARED} == {k: local_rows[sid][k] for k in COMPARED}, sid


@pytest.mark.parametrize(("name", "concurrency"), [("sglang", 1), ("sglang", 4), ("openai", 4)])
def test_served_gives_the_local_tokens_verdicts_and_nfe(server, local_rows, tmp_path, name, concurrency):
    row = run(tmp_path, "batch_size=4", *served(server.url, name, f"backend.concurrency={concurrency}"))
    rows = samples(tmp_path, row)
    assert_same_as_local(rows, local_rows)
    assert any(r["correct"] for r in rows.values())  # the trained tiny model solves puzzles: verdicts say something
    info = json.loads((tmp_path / "default" / row["run_id"] / "run.json").read_text())
    assert info["identity"]["backend"] == {"name": name, "url": server.url,
                                           "model": "<dllm_bench>/tiny/checkpoints/tiny_llada"}
    assert row["server_url"] == server.url and row["backend.name"] == name
    assert row["tokens_per_s"] > 0 and row["nfe_total"] == sum(r["nfe"] for r in local_rows.values())


def test_bfloat16_served_gives_the_local_bfloat16_rows(tmp_path):
    """The server decoding in bfloat16 (started with the run's dtype override) against the local engine in it."""
    srv = Server("model.dtype=bfloat16")
    try:
        local = samples(tmp_path / "l", run(tmp_path / "l", "batch_size=1", "model.dtype=bfloat16"))
        row = run(tmp_path / "s", "batch_size=4", "model.dtype=bfloat16", *served(srv.url, "sglang",
                                                                                 "backend.concurrency=2"))
        assert_same_as_local(samples(tmp_path / "s", row), local)
    finally:
        srv.stop()


def test_a_served_run_never_shares_a_folder_with_a_local_one(server, tmp_path):
    local = run(tmp_path, "batch_size=4")
    remote = run(tmp_path, "batch_size=4", *served(server.url))
    other = run(tmp_path, "batch_size=4", *served(server.url, "openai"))
    assert len({local["run_id"], remote["run_id"], other["run_id"]}) == 3
    assert "server_url" not in local and "backend.name" not in local


def test_http_500s_are_retried(proxy_to, local_rows, tmp_path):
    proxy = proxy_to(["500", "500", "ok", "500"])
    row = run(tmp_path, "batch_size=2", *served(proxy.url, "sglang", "backend.retries=2", "backend.concurrency=1"))
    assert_same_as_local(samples(tmp_path, row), local_rows)
    assert proxy.posts.count("500") == 3 and len(proxy.posts) == LIMIT + 3


def test_http_500s_past_the_retries_end_in_one_line(proxy_to, tmp_path, run_cli):
    proxy = proxy_to(["500"] * 10)
    code, lines = run_cli(f"output_dir={tmp_path}", "progress=false", "warmup=0", "limit=2",
                          *served(proxy.url, "sglang", "backend.retries=2", "backend.concurrency=1"))
    assert code == 2 and len(lines) == 1, lines
    assert f"POST {proxy.url}/generate failed 3 time(s), last: HTTP 500" in lines[0]
    assert not list((tmp_path / "default").glob("*/samples.jsonl"))  # a run without rows leaves no folder


def test_a_slow_answer_past_the_timeout(proxy_to, local_rows, tmp_path, run_cli):
    proxy = proxy_to(["slow"], slow_s=12)  # the first request outlives the timeout, its retry does not
    # a timeout a loaded machine decodes well inside, a delay well past it
    row = run(tmp_path, "batch_size=3", *served(proxy.url, "openai", "backend.timeout_s=6",
                                                "backend.concurrency=1", "backend.retries=1"))
    assert_same_as_local(samples(tmp_path, row), local_rows)
    always = proxy_to(["slow"] * 4, slow_s=12)
    code, lines = run_cli(f"output_dir={tmp_path / 'b'}", "progress=false", "warmup=0", "limit=1",
                          *served(always.url, "openai", "backend.timeout_s=6", "backend.retries=1"))
    assert code == 2 and len(lines) == 1, lines
    assert f"{always.url}/v1/completions failed 2 time(s), last: no answer within the timeout" in lines[0]


def test_a_dropped_connection_is_retried(proxy_to, local_rows, tmp_path):
    proxy = proxy_to(["drop", "ok", "drop"])
    row = run(tmp_path, "batch_size=2", *served(proxy.url, "sglang", "backend.concurrency=2"))
    assert_same_as_local(samples(tmp_path, row), local_rows)
    assert proxy.posts.count("drop") == 2


def test_server_killed_mid_run_then_a_rerun_completes_it(local_rows, tmp_path):
    """The server dies at the third request (after one batch of two): the run ends in one line keeping that batch;
    a rerun against a restarted server (same URL: the proxy's) decodes only the four documents left."""
    victim = Server()
    proxy = FaultProxy(victim.url, ["ok", "ok", "kill"], server=victim)
    try:
        args = ("batch_size=2", *served(proxy.url, "sglang", "backend.concurrency=1", "backend.retries=1"))
        with pytest.raises(BackendError, match=f"POST {proxy.url}/generate failed 2 time"):
            run(tmp_path, *args)
        assert victim.proc.poll() is not None
        kept = [read_jsonl(p) for p in (tmp_path / "default").glob("*/samples.jsonl")]
        assert [len(k) for k in kept] == [2]
        restarted = Server()
        try:
            proxy.target, before = restarted.url, len(proxy.posts)
            row = run(tmp_path, *args)
            assert len(proxy.posts) - before == LIMIT - 2  # nothing decoded twice
            assert_same_as_local(samples(tmp_path, row), local_rows)
        finally:
            restarted.stop()
    finally:
        proxy.close()
        victim.stop()


def test_an_absent_server_or_another_protocol_or_model_is_refused_in_one_line(server, tmp_path, run_cli):
    class Files(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    files = QuietServer(("127.0.0.1", 0), Files)  # a web server, not an engine
    threading.Thread(target=files.serve_forever, daemon=True).start()
    other = f"http://127.0.0.1:{files.server_address[1]}"

    def refused(url: str, name: str, *extra: str) -> str:
        code, lines = run_cli(f"output_dir={tmp_path}", "progress=false", "limit=1",
                              *served(url, name, "backend.retries=0", *extra))
        assert code == 2 and len(lines) == 1, lines
        return lines[0]

    try:
        assert f"GET {other}/get_model_info failed: HTTP 404" in refused(other, "sglang")
    finally:
        files.shutdown()
        files.server_close()
    assert f"GET {other}/v1/models failed 1 time(s), last:" in refused(other, "openai")  # now absent
    assert "not backend.model='inclusionAI/LLaDA2.0-mini'" in refused(server.url, "sglang",
                                                                     "backend.model=inclusionAI/LLaDA2.0-mini")
    assert "not backend.model='gpt'" in refused(server.url, "openai", "backend.model=gpt")
    # the shipped server reports its decoding: a run asking for another is refused, naming what differs
    line = refused(server.url, "sglang", "rule=topk", "policy.steps=24")
    assert (f"{server.url} decodes with policy={{'name': 'blocks', 'steps': None}} (the run: {{'name': 'blocks', "
            "'steps': 24}); rule={'name': 'threshold', 'threshold': 0.9} (the run: {'name': 'topk',") in line
    assert not (tmp_path / "default").exists() or not any((tmp_path / "default").iterdir())


@pytest.mark.parametrize(("overrides", "needle"), [
    (["backend=sglang", "backend.url=null"], "backend.url=None is not allowed"),
    (["backend=sglang", "backend.url=localhost:30000"], "backend.url='localhost:30000' is not allowed"),
    (["backend=openai", "backend.concurrency=0"], "backend.concurrency=0 is not allowed: an integer in [1, 1024]"),
    (["backend=sglang", "backend.timeout_s=0"], "backend.timeout_s=0 is not allowed"),
    (["backend=sglang", "backend.prompt_as=tokens"], "backend.prompt_as='tokens' is not allowed"),
    (["+backend.url=http://x:1"], "backend.url='http://x:1' is not allowed: unknown key for backend 'local'"),
    (["backend=sglang", "rule=oracle"], "rule.name='oracle' is not allowed"),
])
def test_backend_keys_are_checked(overrides, needle):
    with pytest.raises(ConfigError) as err:
        validate_config(compose_config("progress=false", *overrides))
    assert needle in str(err.value)


def test_reported_nfe_reads_sglangs_forward_counts_or_none():
    assert reported_nfe({"dllm_forward_counts": [3, 4, 1]}) == 8
    assert reported_nfe({"completion_tokens": 32}) is None  # not reported: unknown, not guessed
    assert reported_nfe({"dllm_forward_counts": "8"}) is None
