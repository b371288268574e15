"""A served engine as the runner's `Engine`: SGLang's native `/generate` or an OpenAI-compatible `/v1/completions`
over HTTP, with bounded requests in flight, a timeout, retries with back-off and a one-line error.

Only generation moves to the server: the prompts are rendered and tokenized here (sent as token ids unless
`backend.prompt_as=text`), and the stop rules, the answer cut, the token counts and the scoring stay the
runner's. The engine's NFE is what the server reports (SGLang's `meta_info.dllm_forward_counts`, summed), else
unknown (None): never guessed. docs/backends.md.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dllm_bench.decoding.accounting import count_generated_tokens
from dllm_bench.runner.interface import Engine, Generation
from dllm_bench.runner.run_config import RunConfig
from dllm_bench.runner.settings import BackendSettings
from dllm_bench.runner.sharding import DistContext

# SGLang's dLLM builds report the forward passes of a request per block in meta_info under this key
FORWARD_COUNTS = "dllm_forward_counts"
# What dllm_bench.serve adds to meta_info: the decoding engine's own step count (absent from other servers)
OWN_COUNTS = "dllm_bench"
# What dllm_bench.serve adds to its model info: the run-config keys it decodes with (other servers decode by their
# own algorithm config, which the harness cannot read)
OWN_DECODING = "dllm_bench_decoding"
DECODING_KEYS = ("gen_length", "block_length", "temperature", "cfg_scale", "early_stop", "confidence_precision",
                 "confidence_mask_in_softmax", "policy", "rule", "cache")


def decoding_view(run: RunConfig) -> dict[str, Any]:
    """The keys of a run config that choose how an answer is decoded (what a shipped server reports)."""
    c = run.as_dict()
    return {k: c.get(k) for k in DECODING_KEYS} | {"model.dtype": run.model.dtype}


class BackendError(ConnectionError):
    """A served backend failed for good (retries spent, or a refusal no retry can change): one line naming the
    URL and the cause."""


@dataclass(frozen=True)
class Retry:
    """How a request is retried: `retries` further tries after a connection error, a timeout or an HTTP 5xx,
    waiting `backoff_s * 2**k` before try k+1."""

    timeout_s: float = 600.0
    retries: int = 3
    backoff_s: float = 1.0


def _transient(err: BaseException) -> bool:
    if isinstance(err, urllib.error.HTTPError):
        return err.code >= 500
    return isinstance(err, (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError,
                            http.client.HTTPException))


def _cause(err: BaseException) -> str:
    if isinstance(err, urllib.error.HTTPError):
        body = ""
        try:
            body = " ".join(err.read().decode("utf-8", "replace").split())[:200]
        except OSError:
            pass
        return f"HTTP {err.code}{': ' + body if body else ''}"
    if isinstance(err, urllib.error.URLError):
        err = err.reason if isinstance(err.reason, BaseException) else err
    if isinstance(err, (socket.timeout, TimeoutError)):
        return "no answer within the timeout"
    return " ".join(f"{type(err).__name__}: {err}".split())


def request_json(url: str, payload: dict[str, Any] | None, retry: Retry) -> Any:
    """GET (payload None) or POST JSON to `url` and return the decoded answer; transient failures are retried
    `retry.retries` times with back-off, then (or at once for a 4xx or an answer that is not JSON) BackendError."""
    data = None if payload is None else json.dumps(payload).encode()
    method = "GET" if payload is None else "POST"
    tries = retry.retries + 1
    for k in range(tries):
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=retry.timeout_s) as answer:
                body = answer.read()
        except Exception as err:  # noqa: BLE001 - sorted into transient and final below
            if not _transient(err):
                raise BackendError(f"{method} {url} failed: {_cause(err)}") from None
            if k + 1 == tries:
                raise BackendError(f"{method} {url} failed {tries} time(s), last: {_cause(err)} (is the server "
                                   "up? backend.retries and backend.timeout_s set the patience)") from None
            time.sleep(retry.backoff_s * 2**k)
            continue
        try:
            return json.loads(body)
        except ValueError:
            raise BackendError(f"{method} {url} answered something other than JSON ({body[:80]!r}); is it the "
                               "server the backend names?") from None
    raise AssertionError("unreachable")


class Protocol:
    """One server API: how its model is read and how one prompt's request and answer look."""

    name: str

    def __init__(self, base_url: str, retry: Retry):
        self.base = base_url.rstrip("/")
        self.retry = retry

    info_path: str

    def served_model(self, wanted: str | None) -> str:
        raise NotImplementedError

    def server_decoding(self) -> dict[str, Any] | None:
        """The decoding keys the server reports (dllm_bench.serve does), None when it reports none."""
        info = request_json(f"{self.base}{self.info_path}", None, self.retry)
        found = info.get(OWN_DECODING) if isinstance(info, dict) else None
        return found if isinstance(found, dict) else None

    def generate(self, prompt: list[int] | str, gen_length: int, temperature: float, seed: int,
                 stop: tuple[str, ...], model: str) -> tuple[list[int] | None, str, dict[str, Any]]:
        """(output ids or None, output text, meta_info) of one request."""
        raise NotImplementedError

    def _check_model(self, reported: str, wanted: str | None, url: str) -> str:
        if wanted is not None and reported != wanted:
            raise BackendError(f"{url} serves model {reported!r}, not backend.model={wanted!r}")
        return reported


class SGLangNative(Protocol):
    """SGLang's native API: GET /get_model_info, POST /generate with `input_ids` (or `text`) and
    `sampling_params`; the answer's `output_ids`, `text` and `meta_info`."""

    name = "sglang"
    info_path = "/get_model_info"

    def served_model(self, wanted: str | None) -> str:
        url = f"{self.base}/get_model_info"
        info = request_json(url, None, self.retry)
        if not isinstance(info, dict) or "model_path" not in info:
            raise BackendError(f"GET {url} has no model_path: the server does not speak SGLang's native API")
        return self._check_model(str(info["model_path"]), wanted, url)

    def generate(self, prompt, gen_length, temperature, seed, stop, model):
        url = f"{self.base}/generate"
        params = {"max_new_tokens": gen_length, "temperature": temperature, "sampling_seed": seed,
                  "stop": list(stop), "skip_special_tokens": False, "no_stop_trim": True}
        key = "input_ids" if isinstance(prompt, list) else "text"
        out = request_json(url, {key: prompt, "sampling_params": params}, self.retry)
        out = out[0] if isinstance(out, list) and out else out
        if not isinstance(out, dict) or "text" not in out:
            raise BackendError(f"POST {url} answered without text: the server does not speak SGLang's native API")
        ids = out.get("output_ids")
        return (list(ids) if isinstance(ids, list) else None), str(out["text"]), dict(out.get("meta_info") or {})


class OpenAICompletions(Protocol):
    """The OpenAI-compatible completions API: GET /v1/models, POST /v1/completions with the prompt as token ids
    (or text); the choice's `token_ids` where the server returns them (vLLM's `return_token_ids`), else its text."""

    name = "openai"
    info_path = "/v1/models"

    def served_model(self, wanted: str | None) -> str:
        url = f"{self.base}/v1/models"
        info = request_json(url, None, self.retry)
        data = info.get("data") if isinstance(info, dict) else None
        if not isinstance(data, list) or not data or not all(isinstance(m, dict) and "id" in m for m in data):
            raise BackendError(f"GET {url} lists no model: the server does not speak the OpenAI API")
        ids = [str(m["id"]) for m in data]
        if wanted is not None and wanted not in ids:
            raise BackendError(f"{url} serves {', '.join(ids)}, not backend.model={wanted!r}")
        return wanted if wanted is not None else ids[0]

    def generate(self, prompt, gen_length, temperature, seed, stop, model):
        url = f"{self.base}/v1/completions"
        payload = {"model": model, "prompt": prompt, "max_tokens": gen_length, "temperature": temperature,
                   "seed": seed, "stop": list(stop) or None, "skip_special_tokens": False, "return_token_ids": True}
        out = request_json(url, payload, self.retry)
        choices = out.get("choices") if isinstance(out, dict) else None
        if not isinstance(choices, list) or not choices or "text" not in choices[0]:
            raise BackendError(f"POST {url} answered without choices[0].text: the server does not speak the "
                               "OpenAI completions API")
        ids = choices[0].get("token_ids")
        return (list(ids) if isinstance(ids, list) else None), str(choices[0]["text"]), dict(out.get("meta_info") or {})


PROTOCOLS: dict[str, type[Protocol]] = {"sglang": SGLangNative, "openai": OpenAICompletions}


def protocol(backend: BackendSettings) -> Protocol:
    retry = Retry(float(backend.timeout_s), int(backend.retries), float(backend.backoff_s))
    return PROTOCOLS[backend.name](str(backend.url), retry)


def _backend(run: RunConfig) -> BackendSettings:
    if run.backend is None:
        raise ValueError("a local run has no server")
    return run.backend


def server_identity(run: RunConfig) -> dict[str, Any]:
    """What a served run's rows depend on beyond its config: the backend, its URL and the model the server
    reports. Refused here, before any folder is made: a server that is absent or speaks another protocol, and
    one that reports decoding with other keys than the run's (a table cell would be filled by another setting)."""
    backend = _backend(run)
    proto = protocol(backend)
    model = proto.served_model(backend.model)
    served = proto.server_decoding()
    if served is not None:
        ours = json.loads(json.dumps(decoding_view(run)))
        differ = [f"{k}={served.get(k)!r} (the run: {ours[k]!r})" for k in ours if served.get(k) != ours[k]]
        if differ:
            raise BackendError(f"{proto.base} decodes with {'; '.join(differ)}: start the server with the run's "
                               "decoding overrides, or run those")
    return {"name": backend.name, "url": str(backend.url).rstrip("/"), "model": model}


def reported_nfe(meta: dict[str, Any]) -> int | None:
    """The forward passes the server reports for one request (SGLang: `dllm_forward_counts`, one entry per
    block, summed); None when it reports none."""
    counts = meta.get(FORWARD_COUNTS)
    if isinstance(counts, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        return sum(counts)
    return None


class ServedEngine(Engine):
    """Generation by a server: one request per prompt, at most `backend.concurrency` in flight."""

    def __init__(self, run: RunConfig, ctx: DistContext, model: str | None = None):
        from dllm_bench.models.loading import load_tokenizer_config

        backend = _backend(run)
        self.protocol = protocol(backend)
        self.model_name = model if model is not None else self.protocol.served_model(backend.model)
        # tokenizer and ids only: no network built, no weight read (nor downloaded for a hub id)
        self.config, self.tokenizer = load_tokenizer_config(str(run.model.name_or_path))
        self.stop_token_ids = tuple(self.config.stop_token_ids)
        self.device_name = f"{backend.name} server at {self.protocol.base} ({self.model_name})"
        self.chat = bool(run.model.chat)
        self.as_ids = backend.prompt_as == "ids"
        self.gen_length = int(run.gen_length)
        self.temperature = float(run.temperature)
        self.concurrency = int(backend.concurrency)

    def _one(self, prompt: str, seed: int, stop_strings: tuple[str, ...]) -> Generation:
        prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=not self.chat)
        start = time.perf_counter()
        ids, text, meta = self.protocol.generate(prompt_ids if self.as_ids else prompt, self.gen_length,
                                                 self.temperature, seed, stop_strings, self.model_name)
        latency = time.perf_counter() - start
        if ids is None:  # a server that returns text only: its ids as our tokenizer reads the text
            ids = self.tokenizer.encode(text, add_special_tokens=False)
        stops = list(self.stop_token_ids)
        counts = count_generated_tokens(ids, self.tokenizer, stop_strings, stop_token_ids=stops,
                                        pad_token_id=self.config.pad_token_id,
                                        prompt_length=sum(1 for t in prompt_ids if not stops or t != stops[0]))
        own = meta.get(OWN_COUNTS) if isinstance(meta.get(OWN_COUNTS), dict) else {}
        steps = own.get("steps")
        return Generation(ids=[int(t) for t in ids], nfe=reported_nfe(meta), token_counts=counts,
                          steps=int(steps) if isinstance(steps, int) else None, decode_time_s=latency,
                          forward_positions=int(own.get("forward_positions", 0)), edits=None)

    def generate(self, prompts: list[str], docs: list[dict], seeds: list[int], stop_strings: tuple[str, ...],
                 **extra: Any) -> list[Generation]:
        workers = max(1, min(self.concurrency, len(prompts)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda ps: self._one(ps[0], ps[1], stop_strings), zip(prompts, seeds)))
