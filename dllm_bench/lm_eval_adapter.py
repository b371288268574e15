"""lm-evaluation-harness model `dllm_bench`: lm-eval's tasks decoded by our engine (any rule, any cache).

    python -m dllm_bench.lm_eval_adapter --model dllm_bench \
        --model_args pretrained=GSAI-ML/LLaDA-8B-Instruct,rule=frechet,rule.delta=0.25,cache=dual --tasks gsm8k

`model_args` are the runner's own keys (`rule=frechet,rule.delta=0.2,cache=dllm,cache.prompt_interval=100,
policy=slowfast_code`, `model=llada_8b_instruct`, `model.dtype=bfloat16`, `gen_length=256`, ...), composed from
conf/ and checked exactly as `dllm-bench` checks them (`adapter_run_config`); lm-eval's own are `pretrained`
(the checkpoint), `batch_size`, `max_batch_size`, `device`, and the likelihood options below. lm-eval splits
`model_args` at commas, so each key takes one value (no sweeps, no lists).

lm-eval 0.4.13 finds models only in its registry, so this module must be imported before lm-eval looks the
name up: run it as above (it imports, then hands over to lm-eval's CLI, `accelerate launch -m
dllm_bench.lm_eval_adapter ...` for several processes) or `import dllm_bench.lm_eval_adapter` before
`lm_eval.simple_evaluate(model="dllm_bench", ...)`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from dllm_bench.decoding import generate
from dllm_bench.decoding.accounting import cut_at_stop_strings
from dllm_bench.models import load_model
from dllm_bench.models.loading import token_ids
from dllm_bench.runner.components import build_spec
from dllm_bench.runner.compose import compose_run_config
from dllm_bench.runner.config import CONF_DIR, to_container
from dllm_bench.runner.errors import USER_ERRORS, one_line, traceback_requested
from dllm_bench.runner.positions import check_answer_fits, model_positions
from dllm_bench.runner.run_config import RunConfig
from dllm_bench.runner.settings import GROUPS
from dllm_bench.runner.validate import ConfigError, checked_run_config
from dllm_bench.tasks.chat import chat_wrap

log = logging.getLogger(__name__)

PROG = "dllm_bench (lm-eval)"

LM_EVAL_DEFAULT_DEVICE = "cuda:0"  # what lm-eval's CLI passes when no --device was given

if __name__ == "__main__":
    # `python -m dllm_bench.lm_eval_adapter ...`: import this file under its package name, so the model is
    # registered once (the .pth hook of `make setup` registers that name too), then hand over to lm-eval's CLI.
    from dllm_bench.lm_eval_adapter import main as _main

    _main()
    raise SystemExit(0)


@dataclass
class DecodingStats:
    """NFE, tokens and time summed over this process's generate_until requests."""

    requests: int = 0
    nfe: int = 0
    tokens: int = 0
    decode_time_s: float = 0.0
    per_request: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"requests": self.requests, "nfe": self.nfe, "tokens": self.tokens,
                "decode_time_s": round(self.decode_time_s, 4),
                "tokens_per_s": self.tokens / self.decode_time_s if self.decode_time_s else None,
                "tokens_per_nfe": self.tokens / self.nfe if self.nfe else None}


# Where the adapter's defaults differ from conf/config.yaml's (the tiny Sudoku's 24/8 with early stop): the
# papers' answer region, decoded whole as their lm-eval runs did; model_args override them.
# gen_length=None: each request's max_gen_toks in whole blocks.
ADAPTER_DEFAULTS = {"gen_length": 256, "block_length": 32, "early_stop": False}
# model_args of earlier releases -> the runner key that replaced each
OLD_NAMES = {"selector": "rule", "delta": "rule.delta", "tau": "rule.threshold", "f": "rule.f",
             "steps": "policy.steps", "refresh_every": "cache.refresh_every", "dtype": "model.dtype", "chat": "model.chat"}
# runner keys that choose documents or output: lm-eval's own options (--tasks, --limit, --output_path) do that
NOT_FOR_LM_EVAL = ("task", "name", "output_dir", "limit", "offset", "trace", "progress", "warmup", "timing_docs",
                   "num_threads", "count_rule")


def _override(key: str, value: Any) -> str:
    """A model_args pair as the runner's command-line override: lm-eval has already turned "true" into True and
    "none" into None, which for a group is its option `none` (rule=none, cache=none)."""
    if value is None:
        return f"{key}={'none' if key in GROUPS else 'null'}"
    return f"{key}={str(value).lower() if isinstance(value, bool) else value}"


def adapter_run_config(run_keys: dict[str, Any], pretrained: str | None) -> RunConfig:
    """The run config of model_args' runner keys: conf/ composed with them and checked by the runner's own
    `checked_run_config` (every key, type and decoding choice); ConfigError (one line: key, value, what is allowed)
    before any load."""
    for key, value in run_keys.items():
        group = key.partition(".")[0]
        if key in OLD_NAMES:
            raise ConfigError(f"{key}={value!r} is not allowed: model_args use the runner's keys: "
                              f"{_override(OLD_NAMES[key], value)} (docs/tasks.md)")
        if group in NOT_FOR_LM_EVAL:
            raise ConfigError(f"{key}={value!r} is not allowed: lm-eval's own options choose the documents and the "
                              "output (--tasks, --limit, --output_path)")
        if group == "tracking":
            raise ConfigError(f"{key}={value!r} is not allowed: under lm-eval, log with lm-eval's own trackers "
                              "(--wandb_args, --hf_hub_log_args)")
        if key == "model" and not (CONF_DIR / "model" / f"{value}.yaml").is_file():
            presets = ", ".join(sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml")))
            raise ConfigError(f"model={value!r} is not allowed: choose one of {presets} (conf/model/); the "
                              "checkpoint itself goes in pretrained=<hub id or folder>")
    keys = {**ADAPTER_DEFAULTS, **run_keys}
    if keys["gen_length"] in (None, 0):
        keys["gen_length"] = keys["block_length"]  # checked at one block; each request sets its own length
    if pretrained is not None:
        keys["model.name_or_path"] = pretrained
    composed = to_container(compose_run_config([_override(k, v) for k, v in keys.items()]))
    composed.pop("tracking", None)  # the runner's trackers: lm-eval logs with its own
    return checked_run_config(composed)


# DllmBenchLM's own keyword arguments (lm-eval's options and the likelihood settings); every other is a run key
LM_EVAL_KEYS = ("pretrained", "batch_size", "max_batch_size", "device", "mc_num", "mc_batch_size", "check_greedy",
                "stats_path", "max_length")


def check_model_args(args: dict[str, Any]) -> RunConfig:
    """The run config of a model_args dict, refused as DllmBenchLM would refuse it, before any weights load."""
    run_keys = {k: v for k, v in args.items() if k not in LM_EVAL_KEYS}
    pretrained = args.get("pretrained")
    if pretrained is None and "model.name_or_path" not in run_keys and "model" not in run_keys:
        raise ConfigError("pretrained=None is not allowed: give the checkpoint (hub id or local directory) as "
                          "pretrained= (lm-eval names its output folder after it) or model=<conf/model preset>")
    run = adapter_run_config(run_keys, None if pretrained is None else str(pretrained))
    positions = model_positions(run.model.name_or_path)
    if positions is not None:
        check_answer_fits(run.gen_length, *positions)
    return run


def model_args_of(argv: list[str]) -> dict[str, Any] | None:
    """`--model_args` of an lm-eval command line that asks for `--model dllm_bench` (None for another model)."""
    from lm_eval.utils import simple_parse_args_string

    def value(flag: str) -> str | None:
        for i, arg in enumerate(argv):
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        return None

    if value("--model") != "dllm_bench":
        return None
    return simple_parse_args_string(value("--model_args") or "")


def refuse(err: BaseException) -> None:
    """One line on stderr, `dllm_bench (lm-eval): config error: ...`, and exit status 2 (the runner's way)."""
    kind = "config error" if isinstance(err, ConfigError) else "error"
    print(f"{PROG}: {kind}: {one_line(err)}", file=sys.stderr, flush=True)
    raise SystemExit(2) from None


def on_command_line() -> bool:
    """Whether this process is lm-eval's command line (`lm_eval ...`, `python -m lm_eval` or this module)."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(main_spec, "name", "") or ""
    return (name.split(".")[0] in ("lm_eval", "dllm_bench")
            or os.path.basename(sys.argv[0] if sys.argv else "") in ("lm_eval", "lm-eval"))


def device_requested(device: str | None, argv: list[str] | None = None) -> bool:
    """Whether `device` is the user's choice rather than lm-eval's CLI default (`cuda:0` without --device)."""
    if device is None:
        return False
    argv = sys.argv if argv is None else argv
    return device != LM_EVAL_DEFAULT_DEVICE or any(a == "--device" or a.startswith("--device=") for a in argv)


@register_model("dllm_bench")
class DllmBenchLM(LM):
    """generate_until through `dllm_bench.decoding.generate`; loglikelihood by LLaDA's Monte-Carlo masked estimate."""

    def __init__(
        self,
        pretrained: str | None = None,
        batch_size: int | str = 1,
        max_batch_size: int | None = None,
        device: str | None = None,
        mc_num: int = 128,
        mc_batch_size: int = 32,
        check_greedy: bool = False,
        stats_path: str | None = None,
        max_length: int | None = None,
        **run_keys: Any,
    ) -> None:
        super().__init__()
        try:
            run = check_model_args({"pretrained": pretrained, **run_keys})
            if mc_num < 1 or mc_batch_size < 1 or mc_num % mc_batch_size:
                raise ConfigError(f"mc_num={mc_num}, mc_batch_size={mc_batch_size} are not allowed: mc_num must be "
                                  "a positive multiple of mc_batch_size")
            if max_length not in (None, "None") and int(max_length) < 2:
                raise ConfigError(f"max_length={max_length} is not allowed: a rolling window needs at least 2 tokens "
                                  "(context + target)")
        except ConfigError as err:  # on the command line one line, exit 2; a caller of simple_evaluate gets it
            if on_command_line() and not traceback_requested():
                refuse(err)
            raise
        model = str(run.model.name_or_path)
        self.gen_length = None if run_keys.get("gen_length", 1) in (None, 0) else int(run.gen_length)
        self.block_length = int(run.block_length)
        self._setup_distributed(device or run.model.device)
        self.model = load_model(model, dtype=run.model.dtype, device=self._device)
        self.tokenizer = self.model.tokenizer
        if self.tokenizer is None:
            raise ValueError(f"model={model!r}: no tokenizer next to the weights; lm-eval needs one")
        forbidden = token_ids(self.tokenizer, list(run.model.forbidden_tokens), "model.forbidden_tokens")
        self.spec = build_spec(run, forbidden_token_ids=forbidden, tokenizer=self.tokenizer)
        self.config = self.model.config
        self.max_length = self.config.max_sequence_length if max_length in (None, "None") else int(max_length)
        if self.max_length > self.config.max_sequence_length:
            raise ValueError(f"max_length={max_length}: more than the model's max_sequence_length "
                             f"{self.config.max_sequence_length}")
        # a conf/model preset or model.chat decides; with only pretrained=, instruct checkpoints chat
        chat_chosen = "model" in run_keys or "model.chat" in run_keys
        self.chat = bool(run.model.chat) if chat_chosen else bool(self.config.is_instruct)
        # lm-eval's "auto" batch sizing probes memory with HF models; here a string falls back to max_batch_size or 1
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else int(max_batch_size or 1)
        self.mc_num, self.mc_batch_size, self.check_greedy = int(mc_num), int(mc_batch_size), bool(check_greedy)
        self.seed, self.stats_path = int(run.seed), stats_path
        self.model_name = model
        self.stats = DecodingStats()
        self._lm_eval_templated = False

    # -- distributed plumbing (accelerate launch / torchrun set WORLD_SIZE, RANK, LOCAL_RANK, MASTER_*) --------
    def _setup_distributed(self, device: str | None) -> None:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        self._distributed = world > 1
        if self._distributed:
            import torch.distributed as dist

            cuda = torch.cuda.is_available()
            if not dist.is_initialized():
                dist.init_process_group(backend="nccl" if cuda else "gloo")
            self._rank, self._world_size = dist.get_rank(), dist.get_world_size()
            local = int(os.environ.get("LOCAL_RANK", self._rank))
            self._device = f"cuda:{local}" if cuda else "cpu"
            if cuda:
                torch.cuda.set_device(local)
        elif device and device.startswith("cuda") and not torch.cuda.is_available():
            if device_requested(device):
                log.warning("device=%r requested but CUDA is not available; using cpu", device)
            else:  # lm-eval's CLI default, also on machines without a GPU
                log.info("no CUDA device: running on cpu")
            self._device = "cpu"
        else:
            self._device = device or ("cuda" if torch.cuda.is_available() else "cpu")

    @property
    def device(self) -> torch.device:
        return torch.device(self._device)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        if not self._distributed:
            return tensor
        import torch.distributed as dist

        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts) if tensor.dim() == 0 else torch.cat(parts)

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        if not self._distributed:
            return [obj]
        import torch.distributed as dist

        result = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, result, dst=dst)
        return result

    def barrier(self) -> None:
        if self._distributed:
            import torch.distributed as dist

            dist.barrier()

    # -- chat templates ----------------------------------------------------------------------------
    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", self.model_name)).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.tokenizer, "chat_template", None) if chat_template else None

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """lm-eval's --apply_chat_template path: the context arrives templated, so we do not wrap it again."""
        self._lm_eval_templated = True
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def _model_input(self, context: str) -> list[int]:
        """Token ids of the prompt: wrapped as one user turn for chat models (the LLaDA evaluation's way)."""
        if self.chat and not self._lm_eval_templated:
            return self.tokenizer.encode(chat_wrap(context, self.tokenizer), add_special_tokens=False)
        return self.tokenizer.encode(context, add_special_tokens=not self._lm_eval_templated)

    # -- generation ----------------------------------------------------------------------------------
    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), int(self.config.pad_token_id), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
        return ids.to(self.device), mask.to(self.device)

    def _gen_length_for(self, max_gen_toks: int) -> int:
        """The configured gen_length, else max_gen_toks rounded up to whole blocks."""
        if self.gen_length is not None:
            return self.gen_length
        return -(-max_gen_toks // self.block_length) * self.block_length

    def _completion(self, ids: list[int], until: list[str], max_gen_toks: int) -> str:
        ids = ids[:max_gen_toks]
        stops = set(int(t) for t in self.config.stop_token_ids)
        end = next((k for k, t in enumerate(ids) if t in stops), len(ids))
        return cut_at_stop_strings(self.tokenizer.decode(ids[:end], skip_special_tokens=False), until)

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Decode each request's context; the answer is cut at the first stop id and at its `until` strings."""
        out: list[str | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, req in enumerate(requests):
            context, kwargs = req.args
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_gen_toks = int(kwargs.get("max_gen_toks", 256))
            groups.setdefault((tuple(until), max_gen_toks), []).append(i)
        for (until, max_gen_toks), members in groups.items():
            decoding = replace(self.spec.decoding, gen_length=self._gen_length_for(max_gen_toks))
            spec = replace(self.spec, decoding=decoding)
            for start in range(0, len(members), self.batch_size):
                batch = members[start:start + self.batch_size]
                contexts = [requests[i].args[0] for i in batch]
                ids, mask = self._left_pad([self._model_input(c) for c in contexts])
                seeds = [self.seed ^ zlib.crc32(c.encode("utf-8")) for c in contexts]
                with torch.inference_mode():
                    result = generate(self.model, ids, mask, spec.for_batch(seeds, until))
                for row, i in enumerate(batch):
                    text = self._completion(result.tokens[row].tolist(), list(until), max_gen_toks)
                    out[i] = text
                    record = result.records[row]
                    self._record(record, requests[i].args[0], text)
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
        self._write_stats()
        return [o if o is not None else "" for o in out]

    def _record(self, record: Any, context: str, text: str) -> None:
        tokens = int(record.token_counts.get("tokens", 0))
        self.stats.requests += 1
        self.stats.nfe += int(record.nfe)
        self.stats.tokens += tokens
        self.stats.decode_time_s += float(record.wall_time_s)
        self.stats.per_request.append({"context_crc32": zlib.crc32(context.encode("utf-8")), "nfe": int(record.nfe),
                                       "tokens": tokens, "decode_time_s": float(record.wall_time_s)})

    def _write_stats(self) -> None:
        summary = self.stats.summary()
        log.info("dllm_bench decoding (rank %d): %s", self.rank, summary)
        if self.stats_path:
            path = self.stats_path if self.world_size == 1 else f"{self.stats_path}.rank{self.rank}"
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"summary": summary, "per_request": self.stats.per_request}, f)

    # -- likelihoods -----------------------------------------------------------------------------------
    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Plain tokenisation as the LLaDA evaluation did; trailing context spaces move to the continuation."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            continuation, context = context[-spaces:] + continuation, context[:-spaces]
        whole = self.tokenizer.encode(context + continuation)
        prefix = self.tokenizer.encode(context)
        return prefix, whole[len(prefix):]

    def masked_loglikelihood(self, prefix: list[int], target: list[int], seed: int) -> float:
        """LLaDA's estimate: mean over `mc_num` draws of -Σ_masked CE / p_mask, mask ratios stratified per batch."""
        if not target:
            return 0.0
        gen = torch.Generator(device="cpu").manual_seed(seed)
        seq = torch.tensor(prefix + target, dtype=torch.long)
        n, p, b = len(target), len(prefix), self.mc_batch_size
        losses = []
        for _ in range(self.mc_num // b):
            k = int(torch.randint(1, n + 1, (), generator=gen))
            counts = torch.round(torch.linspace(float(k), k + (b - 1) * (n / b), steps=b)).long()
            counts = ((counts - 1) % n) + 1                                            # masks per row, 1..n
            ranks = torch.rand(b, n, generator=gen).argsort(dim=1).argsort(dim=1)     # a random permutation per row
            is_mask = torch.cat([torch.zeros(b, p, dtype=torch.bool), ranks < counts[:, None]], dim=1)
            batch = torch.where(is_mask, int(self.config.mask_token_id), seq.expand(b, -1))
            with torch.inference_mode():
                logits = self.model(batch.to(self.device)).float().cpu()
            p_mask = (counts.float() / n)[:, None].expand(b, p + n)
            ce = F.cross_entropy(logits[is_mask], seq.expand(b, -1)[is_mask], reduction="none") / p_mask[is_mask]
            losses.append(ce.sum().item() / b)
        return -sum(losses) / len(losses)

    def _greedy_matches(self, prefix: list[int], target: list[int]) -> bool:
        """Does decoding the target region one most-confident token at a time reproduce the target?"""
        canvas = torch.tensor([prefix + [int(self.config.mask_token_id)] * len(target)], dtype=torch.long)
        for _ in range(len(target)):
            masked = canvas[0] == self.config.mask_token_id
            with torch.inference_mode():
                logits = self.model(canvas.to(self.device)).float().cpu()[0]
            probs = logits.softmax(-1)
            conf, tok = probs.max(-1)
            conf[~masked] = -1.0
            pos = int(conf.argmax())
            canvas[0, pos] = tok[pos]
        return canvas[0, len(prefix):].tolist() == target

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        results = []
        for req in requests:
            context, continuation = req.args
            prefix, target = self._encode_pair(context, continuation)
            seed = self.seed ^ zlib.crc32((context + "\x00" + continuation).encode("utf-8"))
            ll = self.masked_loglikelihood(prefix, target, seed)
            greedy = self._greedy_matches(prefix, target) if self.check_greedy else False
            results.append((ll, greedy))
            self.cache_hook.add_partial("loglikelihood", req.args, (ll, greedy))
        return results

    def rolling_windows(self, text: str) -> list[tuple[list[int], list[int]]]:
        """lm-eval's disjoint rolling windows of a document: (context, target) pairs whose targets tile the text.

        The first context is the BOS (else EOS) token; each window's context + target fit in `max_length` tokens."""
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        tokens = self.tokenizer.encode(text, add_special_tokens=False)
        prefix = self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.config.eos_token_id
        # lm-eval's windows are AR (input, shifted target): the disjoint pair holds one token more than max_seq_len
        windows = get_rolling_token_windows(tokens, int(prefix), max_seq_len=self.max_length - 1, context_len=1)
        return [make_disjoint_window(w) for w in windows]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Perplexity tasks: the sum over the document's rolling windows of the masked estimate of each target given
        its context. Each term estimates a lower bound (the masked ELBO) on log p(target | context), so by the chain
        rule the sum estimates a lower bound on log p(document): perplexities from it are upper bounds."""
        results = []
        for req in requests:
            (text,) = req.args
            seed = self.seed ^ zlib.crc32(text.encode("utf-8"))
            ll = sum(self.masked_loglikelihood(context, target, seed + i)
                     for i, (context, target) in enumerate(self.rolling_windows(text)))
            results.append(ll)
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, ll)
        return results


def main(argv: list[str] | None = None) -> None:
    """lm-eval's CLI with this model registered; model_args are checked before lm-eval indexes its tasks, and an
    error of ours (a config value, a checkpoint, a data file) is one line with exit status 2."""
    from lm_eval.__main__ import cli_evaluate

    argv = sys.argv[1:] if argv is None else argv
    try:
        args = model_args_of(argv)
        if args is not None:
            check_model_args(args)
        cli_evaluate()
    except USER_ERRORS as err:
        if traceback_requested():
            raise
        refuse(err)


if __name__ == "__main__":
    main()
