"""`python -m dllm_bench.serve --model <checkpoint> --port N [overrides]`: a small HTTP server that decodes with
this project's `generate` and answers in SGLang's native shape (`POST /generate`, `GET /get_model_info`) and the
OpenAI completions shape (`POST /v1/completions`, `GET /v1/models`).

For tests and for users without a GPU: the decoding setting is the run config's (the same keys and overrides as
`dllm-bench`: `rule=... policy=... cache=... gen_length=...`), each request decoded alone under one lock, its
forward passes reported as SGLang's dLLM builds do (`meta_info.dllm_forward_counts`). Loopback by default.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

from dllm_bench.runner.compose import compose_run_config
from dllm_bench.runner.config import portable
from dllm_bench.runner.errors import ConfigError
from dllm_bench.runner.served import FORWARD_COUNTS, OWN_COUNTS, OWN_DECODING, decoding_view
from dllm_bench.runner.sharding import DistContext

log = logging.getLogger("dllm_bench.serve")


class RequestError(ValueError):
    """A request this server cannot decode (HTTP 400, its message as the body)."""


class Decoder:
    """The run config's decoding engine, one request at a time."""

    def __init__(self, overrides: list[str]):
        from dllm_bench.runner.engine import DecodingEngine
        from dllm_bench.runner.threads import apply_num_threads
        from dllm_bench.runner.validate import validate_config

        run = validate_config(compose_run_config(overrides))
        if run.rule.name == "oracle":
            raise ConfigError("rule.name='oracle' is not allowed: the server decodes each request alone")
        apply_num_threads(run.num_threads, str(run.model.name_or_path))
        self.run = run
        self.engine = DecodingEngine(run, DistContext())
        self.model_name = str(portable(str(run.model.name_or_path)))
        self.decoding = decoding_view(run)
        self.lock = threading.Lock()

    def decode(self, prompt: Any, max_new_tokens: Any, temperature: Any, seed: Any, stop: Any) -> dict[str, Any]:
        """One request: output ids, text and what it cost."""
        from dllm_bench.decoding import generate

        engine, run = self.engine, self.run
        if isinstance(prompt, str):
            ids = engine.tokenizer.encode(prompt, add_special_tokens=not run.model.chat)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                          for t in prompt):
            ids = prompt
        else:
            raise RequestError("the prompt must be text or a non-empty list of token ids")
        if max_new_tokens not in (None, run.gen_length):
            raise RequestError(f"this server decodes gen_length={run.gen_length} tokens, not {max_new_tokens!r} "
                               "(start it with gen_length=...)")
        if temperature not in (None, run.temperature):
            raise RequestError(f"this server decodes at temperature={run.temperature}, not {temperature!r}")
        seed = int(run.seed) if seed is None else seed
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise RequestError(f"seed={seed!r}: an integer >= 0 is required")
        stop = tuple(stop or ()) if not isinstance(stop, str) else (stop,)
        input_ids = torch.tensor([ids], dtype=torch.long, device=engine.device)
        mask = torch.ones_like(input_ids)
        with self.lock, torch.inference_mode():
            start = time.perf_counter()
            out = generate(engine.model, input_ids, mask, engine.spec.for_batch([seed], stop))
            elapsed = time.perf_counter() - start
        tokens = out.tokens[0].tolist()
        record = out.records[0]
        return {"ids": tokens, "text": engine.tokenizer.decode(tokens, skip_special_tokens=False),
                "prompt_tokens": len(ids), "nfe": int(record.nfe), "steps": int(record.steps),
                "forward_positions": int(record.forward_positions), "decode_time_s": elapsed}


def _meta(result: dict[str, Any]) -> dict[str, Any]:
    return {"prompt_tokens": result["prompt_tokens"], "completion_tokens": len(result["ids"]),
            "e2e_latency": result["decode_time_s"], FORWARD_COUNTS: [result["nfe"]],  # the whole decode as one entry
            OWN_COUNTS: {"steps": result["steps"], "forward_positions": result["forward_positions"]}}


def sglang_answer(decoder: Decoder, body: dict[str, Any]) -> dict[str, Any]:
    """POST /generate: `input_ids` or `text` and `sampling_params` -> `text`, `output_ids`, `meta_info`."""
    params = body.get("sampling_params") or {}
    prompt = body["input_ids"] if "input_ids" in body else body.get("text")
    result = decoder.decode(prompt, params.get("max_new_tokens"), params.get("temperature"),
                            params.get("sampling_seed"), params.get("stop"))
    return {"text": result["text"], "output_ids": result["ids"], "meta_info": {"id": f"{time.time_ns()}",
                                                                               "finish_reason": {"type": "length"},
                                                                               **_meta(result)}}


def openai_answer(decoder: Decoder, body: dict[str, Any]) -> dict[str, Any]:
    """POST /v1/completions: one prompt (text or token ids) -> one choice with its text and token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]
    result = decoder.decode(prompt, body.get("max_tokens"), body.get("temperature"), body.get("seed"),
                            body.get("stop"))
    return {"id": f"cmpl-{time.time_ns()}", "object": "text_completion", "created": int(time.time()),
            "model": decoder.model_name,
            "choices": [{"index": 0, "text": result["text"], "token_ids": result["ids"], "finish_reason": "length",
                         "logprobs": None}],
            "usage": {"prompt_tokens": result["prompt_tokens"], "completion_tokens": len(result["ids"]),
                      "total_tokens": result["prompt_tokens"] + len(result["ids"])},
            "meta_info": _meta(result)}


def make_handler(decoder: Decoder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/get_model_info":
                self._send(200, {"model_path": decoder.model_name, "tokenizer_path": decoder.model_name,
                                 "is_generation": True, OWN_DECODING: decoder.decoding})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": decoder.model_name, "object": "model",
                                                             "owned_by": "dllm-bench"}],
                                 OWN_DECODING: decoder.decoding})
            elif self.path == "/health":
                self._send(200, {})
            else:
                self._send(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            routes = {"/generate": sglang_answer, "/v1/completions": openai_answer}
            if self.path not in routes:
                self._send(404, {"error": f"no route {self.path}"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not isinstance(body, dict):
                    raise RequestError("the body must be a JSON object")
                self._send(200, routes[self.path](decoder, body))
            except (RequestError, ValueError, KeyError) as err:
                self._send(400, {"error": str(err)})
            except Exception as err:  # noqa: BLE001 - a decode that failed is the server's fault
                log.exception("request failed")
                self._send(500, {"error": f"{type(err).__name__}: {err}"})

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug(fmt, *args)

    return Handler


def serve(decoder: Decoder, host: str, port: int) -> ThreadingHTTPServer:
    """A started-but-not-serving HTTP server bound to (host, port); port 0 picks a free one."""
    server = ThreadingHTTPServer((host, port), make_handler(decoder))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dllm_bench.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory or hub id (model.name_or_path); default: the "
                                        "config's model")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument("--port", type=int, default=30000, help="port (0: a free one, printed)")
    parser.add_argument("overrides", nargs="*", help="run config overrides, as for dllm-bench (model=tiny_dream, "
                                                     "rule=threshold, gen_length=..., ...)")
    args = parser.parse_args(argv)
    overrides = [*args.overrides, *([f"model.name_or_path={args.model}"] if args.model else [])]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        decoder = Decoder(overrides)
        server = serve(decoder, args.host, args.port)
    except (ConfigError, OSError, ValueError) as err:
        print(f"dllm_bench.serve: error: {' '.join(str(err).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    host, port = server.server_address[:2]
    print(f"serving {decoder.model_name} on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
