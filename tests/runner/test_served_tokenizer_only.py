"""A served run needs only the model's tokenizer and config here, never its weights: a folder holding only those
files gives the local engine's rows against the shipped server (serving the full checkpoint elsewhere), a hub id
downloads no weight file, and a served run records its client-side throughput at the concurrency it used. The
vLLM completions shape (the choice's `token_ids`, no NFE reported) is read as the OpenAI client expects.
docs/backends.md."""

from __future__ import annotations

import json
import math
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from dllm_bench.models.checkpoint import HUB_PATTERNS, checkpoint_fingerprint
from dllm_bench.models.loading import load_tokenizer_config
from dllm_bench.runner.config import PACKAGE_DIR
from tests.runner.test_served import LIMIT, QuietServer, Server, assert_same_as_local, run, samples, served

CHECKPOINT = PACKAGE_DIR / "tiny" / "checkpoints" / "tiny_llada"
# the files of a checkpoint a served run reads: its config and tokenizer (no weights)
TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "generation_config.json")


def tokenizer_only(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        (folder / name).write_bytes((CHECKPOINT / name).read_bytes())
    return folder


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server()  # the full embedded checkpoint
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def local_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("local")
    return samples(out, run(out, "batch_size=1"))


def test_a_tokenizer_only_folder_gives_the_local_rows_and_the_client_throughput(server, local_rows, tmp_path):
    folder = tokenizer_only(tmp_path / "tokenizer_only")
    assert not any(f.suffix == ".safetensors" for f in folder.iterdir())
    out = tmp_path / "runs"
    row = run(out, "batch_size=4", f"model.name_or_path={folder}", *served(server.url, "sglang",
                                                                           "backend.concurrency=2"))
    assert_same_as_local(samples(out, row), local_rows)
    # the run's weights part is config.json alone: the same from the full checkpoint, which is not read
    assert row["model.fingerprint"] == checkpoint_fingerprint(CHECKPOINT, weights=False) != checkpoint_fingerprint(
        CHECKPOINT)
    # client-side throughput at the concurrency used, labelled as such
    assert row["throughput_counted"] == "client" and row["client_concurrency"] == 2
    assert row["client_requests_per_s"] == pytest.approx(LIMIT / row["wall_time_s_total"])
    assert row["client_output_tokens_per_s"] == pytest.approx(row["tokens_total"] / row["wall_time_s_total"])
    local = run(tmp_path / "local", "batch_size=4")
    assert not {"throughput_counted", "client_concurrency", "client_requests_per_s"} & set(local)


def test_concurrency_is_capped_by_the_batch(server, tmp_path):
    row = run(tmp_path, "batch_size=2", "limit=2", *served(server.url, "openai", "backend.concurrency=8"))
    assert row["client_concurrency"] == 2


def test_a_hub_id_downloads_config_and_tokenizer_only(tmp_path, monkeypatch):
    folder = tokenizer_only(tmp_path / "snapshot")
    asked: list[list[str]] = []

    def snapshot_download(repo_id: str, revision: str | None, allow_patterns: list[str]) -> str:
        asked.append(allow_patterns)
        return str(folder)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    config, tokenizer = load_tokenizer_config("GSAI-ML/LLaDA-8B-Instruct")
    assert asked and "*.safetensors" in HUB_PATTERNS and not any("safetensors" in p for p in asked[0])
    assert config.mask_token_id == json.loads((CHECKPOINT / "config.json").read_text())["mask_token_id"]
    assert config.stop_token_ids and tokenizer.encode("12") == load_tokenizer_config(CHECKPOINT)[1].encode("12")


def test_a_folder_without_a_tokenizer_is_refused(tmp_path):
    folder = tmp_path / "config_only"
    folder.mkdir()
    (folder / "config.json").write_bytes((CHECKPOINT / "config.json").read_bytes())
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        load_tokenizer_config(folder)


class VLLMShaped:
    """A server in this process answering as vLLM's OpenAI server does (GET /v1/models with its fields; POST
    /v1/completions: `choices[0]` with `text`, `token_ids`, `prompt_token_ids`, `stop_reason`, `usage`, and no
    NFE anywhere), its tokens from the shipped server behind it. Records each request body."""

    def __init__(self, target: str) -> None:
        self.bodies: list[dict] = []
        shaped = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._send({"object": "list", "data": [{"id": "inclusionAI/LLaDA2.0-mini", "object": "model",
                                                        "created": 0, "owned_by": "vllm", "root": "/models/x",
                                                        "parent": None, "max_model_len": 4096, "permission": []}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                shaped.bodies.append(body)
                forward = {**body, "model": None}
                req = urllib.request.Request(target + "/v1/completions", data=json.dumps(forward).encode(),
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as answer:
                    ours = json.loads(answer.read())
                choice = ours["choices"][0]
                self._send({"id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"],
                            "choices": [{"index": 0, "text": choice["text"], "logprobs": None,
                                         "finish_reason": "length", "stop_reason": None,
                                         "token_ids": choice["token_ids"], "prompt_logprobs": None,
                                         "prompt_token_ids": body["prompt"]}],
                            "service_tier": None, "system_fingerprint": None, "usage": ours["usage"],
                            "kv_transfer_params": None})

            def log_message(self, *args) -> None:
                pass

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_the_vllm_completion_shape_gives_the_tokens_and_leaves_nfe_unknown(server, local_rows, tmp_path):
    vllm = VLLMShaped(server.url)
    try:
        row = run(tmp_path, "batch_size=3", *served(vllm.url, "openai", "backend.concurrency=3"))
    finally:
        vllm.close()
    rows = samples(tmp_path, row)
    same = ("raw_completion", "completion", "extracted", "correct", "tokens_cut", "tokens_nonstop", "tokens_canvas",
            "tokens_all", "tokens_cut_paper")
    assert {s: {k: r[k] for k in same} for s, r in rows.items()} == {
        s: {k: r[k] for k in same} for s, r in local_rows.items()}
    assert all(r["nfe"] is None and r["steps"] is None for r in rows.values())  # not reported: never guessed
    assert math.isnan(row["nfe_mean"]) and math.isnan(row["tokens_per_forward"])
    assert row["server_model"] == "inclusionAI/LLaDA2.0-mini"
    # the harness's token ids in, token ids asked back, the model the server lists
    body = vllm.bodies[0]
    assert isinstance(body["prompt"], list) and all(isinstance(t, int) for t in body["prompt"])
    assert body["return_token_ids"] is True and body["model"] == "inclusionAI/LLaDA2.0-mini"
