"""Train a D2F LoRA (PEFT format) on the trained tiny LLaDA or Dream with D2F's objective (:mod:`.d2f_objective`).

    python -m dllm_bench.tiny.train_d2f --flavour llada    # -> dllm_bench/tiny/checkpoints/tiny_llada_d2f/
    python -m dllm_bench.tiny.train_d2f --flavour dream    # -> dllm_bench/tiny/checkpoints/tiny_dream_d2f/

The base checkpoint (``tiny_<flavour>``) stays frozen; a LoRA pair on every layer's attention projections (D2F's
target modules: q, k, v and the output projection, ``attn_out`` in LLaDA's names) learns block-causal decoding on
the anchored grid, the block size drawn per batch from ``--block-sizes``. The adapter directory gets
``adapter_config.json`` + ``adapter_model.safetensors`` (base ``../tiny_<flavour>``) and ``train_log.json`` (the
command, config, loss curve and times). The shipped adapters' recipe is :data:`SHIPPED_RECIPE`.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from dllm_bench.models import load_model
from dllm_bench.models.lora import D2F_TARGET_MODULES, save_adapter
from dllm_bench.models.tiny_lora import TINY_ALPHA, TINY_RANK
from dllm_bench.tasks.sudoku_puzzles import puzzle_stream
from dllm_bench.tiny.d2f_objective import d2f_loss, mask_answer_blocks
from dllm_bench.tiny.encoding import DEFAULT_GEN_LENGTH, encode_batch
from dllm_bench.tiny.lora_training import attach_lora, lora_pairs
from dllm_bench.tiny.train import learning_rate

CHECKPOINT_ROOT = Path(__file__).parent / "checkpoints"
FLAVOURS = ("llada", "dream")
TARGET_KINDS = ("teacher", "sample")
# what a field left at None takes per flavour (`--flavour X` alone retrains the shipped adapter)
SHIPPED_RECIPE = {"llada": {"steps": 500}, "dream": {"steps": 250}}


@dataclass
class D2FTrainConfig:
    """Everything that determines an adapter's training run (written into train_log.json and the model card)."""

    flavour: str = "llada"
    seed: int = 0
    steps: int | None = None
    batch_size: int = 32
    lr: float = 2e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 20
    weight_decay: float = 0.05  # D2F's AdamW: betas (0.9, 0.95), weight decay 0.05, grad clip 1
    grad_clip: float = 1.0
    r: int = TINY_RANK
    lora_alpha: float = TINY_ALPHA
    block_sizes: list[int] = field(default_factory=lambda: [4, 8])
    gen_length: int = DEFAULT_GEN_LENGTH
    # 'teacher': the base model's distributions (adapter off, full attention; D2F's self_align) as soft targets;
    # 'sample': the answer tokens
    targets: str = "teacher"
    puzzles: str = "open"
    threads: int = 1
    log_every: int = 25

    def __post_init__(self) -> None:
        if self.flavour not in FLAVOURS:
            raise ValueError(f"flavour {self.flavour!r} is not one of {list(FLAVOURS)}")
        if self.targets not in TARGET_KINDS:
            raise ValueError(f"targets {self.targets!r} is not one of {list(TARGET_KINDS)}")
        if self.steps is None:
            self.steps = SHIPPED_RECIPE[self.flavour]["steps"]
        if self.steps < 1 or self.batch_size < 1 or self.r < 1:
            raise ValueError(f"steps={self.steps}, batch_size={self.batch_size}, r={self.r}: each must be >= 1")
        if not self.block_sizes or min(self.block_sizes) < 1:
            raise ValueError(f"block_sizes {self.block_sizes}: give one or more sizes >= 1")


def train_adapter(cfg: D2FTrainConfig, out_dir: Path) -> dict:
    """Train the adapter and write it (and train_log.json) to ``out_dir``; returns the log."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    base_dir = CHECKPOINT_ROOT / f"tiny_{cfg.flavour}"
    student = load_model(base_dir, device="cpu", dtype="float32", attention="block_causal", block_grid="anchored")
    teacher = load_model(base_dir, device="cpu", dtype="float32") if cfg.targets == "teacher" else None
    params = attach_lora(student, r=cfg.r, lora_alpha=cfg.lora_alpha, seed=cfg.seed)
    student.train()
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay, eps=1e-8)
    tokenizer, mcfg = student.tokenizer, student.config
    stream = puzzle_stream(cfg.seed, "train", cfg.puzzles)
    block_rng = random.Random(cfg.seed + 1)
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    log = {"config": asdict(cfg), "base": f"../tiny_{cfg.flavour}", "trainable_parameters": sum(p.numel() for p in params),
           "command": "python -m dllm_bench.tiny.train_d2f " + " ".join(sys.argv[1:]), "torch": torch.__version__,
           "machine": platform.processor() or platform.machine(), "curve": [], "train_seconds": 0.0}
    t_run, cpu_run = time.time(), time.process_time()
    loss_acc, n_acc = 0.0, 0
    for step in range(cfg.steps):
        t0 = time.time()
        block = block_rng.choice(cfg.block_sizes)
        batch = [next(stream) for _ in range(cfg.batch_size)]
        prompts, answers = encode_batch(tokenizer, mcfg, [b[0] for b in batch], [b[1] for b in batch], cfg.gen_length)
        noisy, masked, p_mask = mask_answer_blocks(answers, mcfg.mask_token_id, block, gen)
        ids = torch.cat([prompts, noisy], dim=1)
        span = (prompts.shape[1], ids.shape[1])
        targets = answers
        if teacher is not None:
            with torch.no_grad():
                targets = torch.softmax(teacher(ids, logits_range=span).float(), dim=-1)
        logits = student(ids, logits_range=span, block_anchor=prompts.shape[1], block_size=block)
        loss = d2f_loss(logits, targets, masked, p_mask)
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        log["train_seconds"] += time.time() - t0
        loss_acc, n_acc = loss_acc + loss.item(), n_acc + 1
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            entry = {"step": step + 1, "loss": round(loss_acc / n_acc, 4), "lr": learning_rate(cfg, step),
                     "train_seconds": round(log["train_seconds"], 1)}
            log["curve"].append(entry)
            print(json.dumps(entry), flush=True)
            loss_acc, n_acc = 0.0, 0
    log["wall_seconds"] = round(time.time() - t_run, 1)
    log["cpu_seconds"] = round(time.process_time() - cpu_run, 1)
    save_adapter(out_dir, lora_pairs(student), base=log["base"], r=cfg.r, lora_alpha=cfg.lora_alpha,
                 target_modules=D2F_TARGET_MODULES[cfg.flavour])
    (out_dir / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    return log


def parse_args(argv: list[str] | None = None) -> tuple[D2FTrainConfig, Path]:
    """CLI -> (config, adapter directory)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = D2FTrainConfig()
    ap.add_argument("--flavour", choices=FLAVOURS, required=True)
    ap.add_argument("--steps", type=int, default=None,
                    help="default: " + ", ".join(f"{f} {r['steps']}" for f, r in SHIPPED_RECIPE.items()))
    for name in ("seed", "batch_size", "warmup_steps", "r", "gen_length", "threads", "log_every"):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    for name in ("lr", "min_lr_ratio", "weight_decay", "grad_clip", "lora_alpha"):
        ap.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name))
    ap.add_argument("--block-sizes", type=int, nargs="+", default=defaults.block_sizes,
                    help="answer block sizes, one drawn per batch (default 4 8)")
    ap.add_argument("--targets", choices=TARGET_KINDS, default=defaults.targets,
                    help="'teacher' (the base model's distributions, D2F's self_align; default) or 'sample'")
    ap.add_argument("--out", type=Path, default=None, help="adapter dir (default: checkpoints/tiny_<flavour>_d2f)")
    args = vars(ap.parse_args(argv))
    out = args.pop("out")
    try:
        cfg = D2FTrainConfig(**args)
    except ValueError as err:
        ap.exit(2, f"{err}\n")
    return cfg, out or CHECKPOINT_ROOT / f"tiny_{cfg.flavour}_d2f"


def main(argv: list[str] | None = None) -> None:
    cfg, out = parse_args(argv)
    train_adapter(cfg, out)


if __name__ == "__main__":
    main()
