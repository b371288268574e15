"""Train a tiny LLaDA or Dream on 4x4 Sudoku with LLaDA's masked-diffusion SFT objective.

    python -m dllm_bench.tiny.train --flavour llada        # both stages: 34 min wall recorded (2 threads)
    python -m dllm_bench.tiny.train --flavour dream        # 54 min wall recorded (2 threads)
    python -m dllm_bench.tiny.train --flavour llada_moe    # LLaDA-MoE network (models/moe.py), 8 experts top 2

Two stages by default: stage 1 (``--stage1-steps``, from random init) learns the constraints on minimal
unique-solution puzzles, stage 2 (``--steps``, from the stage-1 weights) trains on the task's open puzzles
(few clues, target a uniformly random valid completion), which calibrates the confidences of open cells.
The loss of a masked cell is taken against its exact posterior given the visible cells (``--targets
posterior``, the default; LLaDA's objective in expectation, see ``encoding.posterior_answer_targets``).
The network sizes and step counts of the shipped checkpoints are ``SHIPPED_RECIPE``. For ``llada_moe`` the
routers also get the Switch load-balancing loss the published LLaDA-MoE modeling file computes, weighted by
``--router-aux-loss-coef`` (0.01, the ``router_aux_loss_coef`` of the published config class); ``--mlp-hidden-size``
is then each expert's size.
``--stage1-steps 0 --init-from DIR`` runs stage 2 alone from a stage-1 checkpoint.

Writes the checkpoint (config.json, model.safetensors, tokenizer files) to
``dllm_bench/tiny/checkpoints/tiny_<flavour>/`` every ``--save-every`` steps and at the end, the loss curve to
``train_log.json`` beside it, and a resumable state (weights, optimizer, step) to ``outputs/tiny_train/``;
``--resume`` continues an interrupted run where it stopped, on the same data.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from dllm_bench.models import DiffusionLM
from dllm_bench.tasks.sudoku_puzzles import PUZZLE_KINDS, load_test_set, puzzle_stream
from dllm_bench.tiny.encoding import DEFAULT_GEN_LENGTH, encode_batch, posterior_answer_targets, prompt_ids
from dllm_bench.tiny.model_setup import (
    BLOCK_FORMATS,
    FLAVOURS,
    build_tiny_model,
    build_tiny_tokenizer,
    save_tiny_checkpoint,
)
from dllm_bench.tiny.objective import (
    block_diffusion_batch,
    block_noise,
    load_balancing_loss,
    mask_answers,
    masked_diffusion_loss,
)

CHECKPOINT_ROOT = Path(__file__).parent / "checkpoints"
STATE_ROOT = Path("outputs") / "tiny_train"
# the shipped checkpoints' recipe per flavour: what a field left at None takes (`--flavour X` alone retrains it)
SHIPPED_RECIPE = {
    "llada": {"stage1_steps": 1000, "steps": 3500, "d_model": 128, "mlp_hidden_size": 384},
    "dream": {"stage1_steps": 600, "steps": 3100, "d_model": 160, "mlp_hidden_size": 480},
    # 8 experts of 192, top 2: the active MLP width (384) and active parameters (0.88 M) of tiny_llada's
    "llada_moe": {"stage1_steps": 1000, "steps": 3500, "d_model": 128, "mlp_hidden_size": 192},
    # block diffusion (the block objective, `objective.block_diffusion_batch`); llada2: 8 experts top 2 of 48 each.
    # The shipped ones ran with --n-layers 3 --batch-size 32 --lr 0.002 --warmup-steps 30, and fast_dllm_v2 then a
    # second run from those weights (--stage1-steps 0 --init-from DIR --steps 700 --lr 0.001 --warmup-steps 20):
    # the exact commands are in their MODEL_CARD.md
    "fast_dllm_v2": {"stage1_steps": 0, "steps": 700, "d_model": 64, "mlp_hidden_size": 192},
    "sdar": {"stage1_steps": 0, "steps": 700, "d_model": 64, "mlp_hidden_size": 192},
    "llada2": {"stage1_steps": 0, "steps": 2000, "d_model": 64, "mlp_hidden_size": 96},
}
# the block-diffusion flavours' block size (config bd_size / block_size) when --block-size is not given
SHIPPED_BLOCK_SIZE = {"fast_dllm_v2": 4, "sdar": 4, "llada2": 4}
TARGET_KINDS = ("posterior", "sample")
# stage 1 (from random init, minimal puzzles) of the shipped recipe; the other settings are shared with stage 2
STAGE1_OVERRIDES = {"puzzles": "minimal", "lr": 2e-3, "warmup_steps": 100, "init_from": None, "stage1_steps": 0}


@dataclass
class TrainConfig:
    """Everything that determines a training run (written into train_log.json and the model card)."""

    flavour: str = "llada"
    seed: int = 0
    puzzles: str = "open"  # 'open' (several valid answers; the task) or 'minimal' (unique solution; stage 1)
    init_from: str | None = None  # checkpoint dir whose weights start the run (stage 2), else random init
    # fields left at None take the flavour's SHIPPED_RECIPE value
    stage1_steps: int | None = None  # > 0: `two_stage` first trains that many steps from scratch on minimal puzzles
    steps: int | None = None  # stage-2 steps
    batch_size: int = 128
    lr: float = 1e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 20
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eps: float = 1e-3
    # 'sample': cross-entropy against the sampled completion (LLaDA's estimator as written); 'posterior': against
    # the exact posterior marginals of the open cells given the clues and visible cells -- the same objective in
    # expectation without the completion's sampling noise (identical on unique-solution puzzles)
    targets: str = "posterior"
    # answer lengths drawn per batch (EOS-padded): mostly the default 24, sometimes longer, so that a longer
    # gen_length at inference still ends the answer with EOS
    answer_lengths: list[int] = field(default_factory=lambda: [24, 24, 24, 24, 24, 24, 32, 64])
    d_model: int | None = None
    n_layers: int = 4
    n_heads: int = 4
    mlp_hidden_size: int | None = None  # llada_moe: each expert's size (expert_intermediate_size)
    num_experts: int = 8  # llada_moe only
    num_experts_per_tok: int = 2  # llada_moe only
    # weight of the routers' load-balancing loss (llada_moe only; the published config class's default 0.01)
    router_aux_loss_coef: float = 0.01
    # llada2: the auxiliary-loss-free balancing its config names (moe_router_enable_expert_bias): after each step every
    # MoE layer's expert bias moves by this much towards balance (up for under-used experts, down for over-used)
    expert_bias_update_rate: float = 1e-3
    block_size: int | None = None  # block-diffusion flavours: the model's block (default SHIPPED_BLOCK_SIZE)
    # LLaDA schema's include_qkv_bias (Dream always has q/k/v biases): without them the seed-0 LLaDA run sat on
    # a loss plateau (0 % solved at step 800) where the same run with them learnt as fast as Dream (docs/tiny.md)
    llada_qkv_bias: bool = True
    threads: int = 2
    log_every: int = 25
    save_every: int = 200
    monitor_every: int = 400  # 0: no monitor
    monitor_puzzles: int = 128  # held-out puzzles decoded one cell per step during training (monitoring only)

    def __post_init__(self) -> None:
        if self.puzzles not in PUZZLE_KINDS:
            raise ValueError(f"puzzles {self.puzzles!r} is not one of {sorted(PUZZLE_KINDS)}")
        if self.targets not in TARGET_KINDS:
            raise ValueError(f"targets {self.targets!r} is not one of {list(TARGET_KINDS)}")
        if self.flavour not in FLAVOURS:
            raise ValueError(f"flavour {self.flavour!r} is not one of {', '.join(map(repr, FLAVOURS))}")
        if not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise ValueError(f"num_experts_per_tok={self.num_experts_per_tok}: must be in [1, num_experts="
                             f"{self.num_experts}]")
        for name, value in SHIPPED_RECIPE[self.flavour].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.block_size is None:
            self.block_size = SHIPPED_BLOCK_SIZE.get(self.flavour, 0)
        if self.flavour in BLOCK_FORMATS and self.block_size < 1:
            raise ValueError(f"block_size={self.block_size}: flavour {self.flavour!r} needs a positive block size")
        if min(self.answer_lengths) < 17:
            raise ValueError(f"answer_lengths {self.answer_lengths}: each must be >= 17 (16 digits + end token)")
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps={self.steps}, batch_size={self.batch_size}: both must be >= 1")


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio * lr at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def init_weights(model: DiffusionLM, n_layers: int) -> None:
    """GPT-2 style init: N(0, 0.02), residual output projections scaled by 1/sqrt(2 n_layers)."""
    for name, p in model.named_parameters():
        if p.dim() < 2:
            continue
        std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
        torch.nn.init.normal_(p, mean=0.0, std=std)


@torch.no_grad()
def monitor_solve_rates(model: DiffusionLM, rows: list[dict], gen_length: int) -> dict[str, float]:
    """Solved fractions of sequential top-1 and Fréchet 0.25 decoding in one block (the training monitor)."""
    from dllm_bench.tiny.evaluate import DecodeSetting, evaluate_setting

    settings = {"sequential_solved": DecodeSetting("sequential", "blocks", {"steps": gen_length}, "topk"),
                "frechet_solved": DecodeSetting("Fréchet 0.25", "blocks", {}, "frechet", {"delta": 0.25})}
    return {key: evaluate_setting(model, rows, setting, "none", gen_length=gen_length, block_length=gen_length,
                                  batch_size=len(rows))["accuracy"]
            for key, setting in settings.items()}


def _record_router_logits(model: DiffusionLM) -> list[torch.Tensor]:
    """A list that each MoE layer's router appends its logits [N, E] to in every forward that builds a graph."""
    logits: list[torch.Tensor] = []

    def keep(module: torch.nn.Module, args: tuple, out: torch.Tensor) -> None:
        if torch.is_grad_enabled():
            logits.append(out)

    for layer in model.layers:
        if getattr(layer, "is_moe", False):
            layer.gate.register_forward_hook(keep)
    return logits


def _record_expert_loads(model: DiffusionLM) -> dict[int, torch.Tensor]:
    """Per LLaDA2 MoE layer, the count of tokens routed to each expert [E] in the forwards that build a graph."""
    loads: dict[int, torch.Tensor] = {}

    for i, layer in enumerate(model.layers):
        if getattr(layer, "is_moe", False):
            def keep(module: torch.nn.Module, args: tuple, out: tuple, i: int = i) -> None:
                if torch.is_grad_enabled():
                    count = torch.bincount(out[0].flatten(), minlength=module.expert_bias.shape[0])
                    loads[i] = loads.get(i, 0) + count
            layer.gate.register_forward_hook(keep)
    return loads


@torch.no_grad()
def _update_expert_bias(model: DiffusionLM, loads: dict[int, torch.Tensor], rate: float) -> None:
    """Auxiliary-loss-free balancing: each expert's bias += rate * sign(mean load - its load); loads cleared."""
    for i, load in loads.items():
        load = load.float()
        model.layers[i].gate.expert_bias += rate * torch.sign(load.mean() - load)
    loads.clear()


def _save_state(path: Path, model: DiffusionLM, opt: torch.optim.Optimizer, step: int, log: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "log": log}, tmp)
    os.replace(tmp, path)


def train(cfg: TrainConfig, out_dir: Path, state_path: Path, resume: bool = False, stop_at: int | None = None) -> dict:
    """Run (or resume) training; returns the log dict (config, loss curve, monitor accuracies, timings).

    ``stop_at`` ends the run early after that many steps (as an interruption would), state saved.
    """
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    tokenizer = build_tiny_tokenizer(cfg.flavour)
    model = build_tiny_model(cfg.flavour, tokenizer, d_model=cfg.d_model, n_layers=cfg.n_layers,
                             n_heads=cfg.n_heads, mlp_hidden_size=cfg.mlp_hidden_size,
                             llada_qkv_bias=cfg.llada_qkv_bias, num_experts=cfg.num_experts,
                             num_experts_per_tok=cfg.num_experts_per_tok, block_size=cfg.block_size)
    init_weights(model, cfg.n_layers)
    block_objective = cfg.flavour in BLOCK_FORMATS
    router_logits = _record_router_logits(model) if cfg.flavour == "llada_moe" else []
    expert_loads = _record_expert_loads(model) if cfg.flavour == "llada2" else {}
    init_log = None
    if cfg.init_from:
        from dllm_bench.models import load_model

        model.load_state_dict(load_model(cfg.init_from, device="cpu", dtype="float32").state_dict())
        init_log = json.loads((Path(cfg.init_from) / "train_log.json").read_text())
    mcfg = model.config
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.98),
    )
    log = {
        "config": asdict(cfg), "parameters": model.num_parameters(), "curve": [], "monitor": [],
        "command": "python -m dllm_bench.tiny.train " + " ".join(sys.argv[1:]),
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
        "train_seconds": 0.0, "init_log": init_log,  # the run these weights started from (stage 1)
    }
    start_step = 0
    if resume and state_path.exists():
        state = torch.load(state_path, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_step, log = state["step"], state["log"]
        print(f"resumed at step {start_step}", flush=True)

    stream = puzzle_stream(cfg.seed, "train", cfg.puzzles)
    stream_for_length = puzzle_stream(cfg.seed, "test", cfg.puzzles)
    length_rng = random.Random(cfg.seed + 1)
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    prompt_length = len(prompt_ids(tokenizer, next(stream_for_length)[0]))  # one length for every puzzle
    for _ in range(start_step):  # replay the data and noise streams so a resumed run sees the same batches
        g_len = length_rng.choice(cfg.answer_lengths)
        for _ in range(cfg.batch_size):
            next(stream)
        if block_objective:
            block_noise(cfg.batch_size, prompt_length, g_len, cfg.block_size, cfg.eps, gen)
        else:
            torch.rand(cfg.batch_size, 1, generator=gen)
            torch.rand(cfg.batch_size, g_len, generator=gen)
    monitor_rows = load_test_set()[:cfg.monitor_puzzles]

    tokens_seen, t_last, loss_acc, aux_acc, n_acc = 0, time.time(), 0.0, 0.0, 0
    t_run, wall_before = time.time(), log.get("wall_seconds", 0.0)  # wall clock incl. monitors and saves
    cpu_run, cpu_before = time.process_time(), log.get("cpu_seconds", 0.0)  # this process's CPU time, all threads
    for step in range(start_step, cfg.steps if stop_at is None else min(stop_at, cfg.steps)):
        t0 = time.time()
        g_len = length_rng.choice(cfg.answer_lengths)
        batch = [next(stream) for _ in range(cfg.batch_size)]
        prompts, answers = encode_batch(tokenizer, mcfg, [b[0] for b in batch], [b[1] for b in batch], g_len)
        answer_blocks = None
        if block_objective:
            bd = block_diffusion_batch(prompts, answers, mcfg.mask_token_id, cfg.block_size, cfg.eps, gen)
            masked, p_mask, answer_blocks = bd.masked, bd.p_mask, bd.answer_blocks
            raw = model(bd.input_ids, position_ids=bd.position_ids, raw_logits=True,
                        query_key_mask=bd.pair_mask.expand(cfg.batch_size, -1, -1))
            logits = raw[:, bd.logit_sources(mcfg.shift_logits)]
        else:
            noisy, masked, p_mask = mask_answers(answers, mcfg.mask_token_id, cfg.eps, gen)
            p_len = prompts.shape[1]
            logits = model(torch.cat([prompts, noisy], dim=1), logits_range=(p_len, p_len + g_len))
        targets = answers if cfg.targets == "sample" else posterior_answer_targets(
            tokenizer, [b[0] for b in batch], answers, masked, mcfg.vocab_size, answer_blocks)
        loss = masked_diffusion_loss(logits, targets, masked, p_mask)
        total = loss
        if router_logits:
            aux = load_balancing_loss(router_logits, cfg.num_experts, cfg.num_experts_per_tok)
            total = loss + cfg.router_aux_loss_coef * aux
            router_logits.clear()
            aux_acc += aux.item()
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, step)
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        if expert_loads:
            _update_expert_bias(model, expert_loads, cfg.expert_bias_update_rate)
        log["train_seconds"] += time.time() - t0
        tokens_seen += prompts.numel() + answers.numel()
        loss_acc, n_acc = loss_acc + loss.item(), n_acc + 1

        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            now = time.time()
            entry = {"step": done, "loss": round(loss_acc / n_acc, 4), "lr": learning_rate(cfg, step),
                     "tokens_per_s": round(tokens_seen / (now - t_last)), "train_seconds": round(log["train_seconds"], 1)}
            if cfg.flavour == "llada_moe":
                entry["aux_loss"] = round(aux_acc / n_acc, 4)  # load balancing: 1 per slot = uniform
            log["curve"].append(entry)
            print(json.dumps(entry), flush=True)
            tokens_seen, t_last, loss_acc, aux_acc, n_acc = 0, now, 0.0, 0.0, 0
        if cfg.monitor_every and (done % cfg.monitor_every == 0 or done == cfg.steps):
            model.eval()
            rates = monitor_solve_rates(model, monitor_rows, DEFAULT_GEN_LENGTH)
            model.train()
            log["monitor"].append({"step": done, **rates})
            print(json.dumps(log["monitor"][-1]), flush=True)
        if done % cfg.save_every == 0 or done in (cfg.steps, stop_at):
            log["wall_seconds"] = round(wall_before + time.time() - t_run, 1)
            log["cpu_seconds"] = round(cpu_before + time.process_time() - cpu_run, 1)
            save_tiny_checkpoint(model, tokenizer, out_dir, log)
            _save_state(state_path, model, opt, done, log)
    return log


def parse_args(argv: list[str] | None = None) -> tuple[TrainConfig, Path, Path, bool]:
    """CLI -> (TrainConfig, checkpoint dir, resumable-state path, resume flag)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = TrainConfig()
    ap.add_argument("--flavour", choices=FLAVOURS, required=True)
    for name in SHIPPED_RECIPE["llada"]:
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=None,
                        help="default: the shipped recipe's, "
                        + ", ".join(f"{f} {r[name]}" for f, r in SHIPPED_RECIPE.items()))
    for name in ("seed", "batch_size", "n_layers", "n_heads", "threads", "num_experts", "num_experts_per_tok",
                 "save_every", "monitor_every", "monitor_puzzles", "log_every", "warmup_steps"):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    ap.add_argument("--block-size", type=int, default=None,
                    help="block-diffusion flavours' block size, default " + ", ".join(
                        f"{f} {b}" for f, b in SHIPPED_BLOCK_SIZE.items()))
    ap.add_argument("--targets", choices=TARGET_KINDS, default=defaults.targets,
                    help="loss targets of the open cells: 'posterior' (default) or 'sample'")
    for name in ("lr", "weight_decay", "eps", "router_aux_loss_coef", "expert_bias_update_rate"):
        ap.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name))
    ap.add_argument("--llada-qkv-bias", action=argparse.BooleanOptionalAction, default=defaults.llada_qkv_bias,
                    help="LLaDA schema's include_qkv_bias (default: on)")
    ap.add_argument("--puzzles", choices=sorted(PUZZLE_KINDS), default=defaults.puzzles,
                    help="training puzzles: 'open' (the task, default) or 'minimal' (unique solution; stage 1)")
    ap.add_argument("--init-from", default=None, help="checkpoint dir to start from (default: random init)")
    ap.add_argument("--out", type=Path, default=None, help="checkpoint dir (default: checkpoints/tiny_<flavour>)")
    ap.add_argument("--state", type=Path, default=None,
                    help="resumable state file (default: outputs/tiny_train/<flavour>/state.pt)")
    ap.add_argument("--resume", action="store_true", help="continue from the state file")
    args = vars(ap.parse_args(argv))
    out, state, resume = args.pop("out"), args.pop("state"), args.pop("resume")
    cfg = TrainConfig(**args)
    out = out or CHECKPOINT_ROOT / f"tiny_{cfg.flavour}"
    return cfg, out, state or STATE_ROOT / cfg.flavour / "state.pt", resume


def two_stage(cfg: TrainConfig, out: Path, state_path: Path, resume: bool = False) -> dict:
    """Stage 1 (cfg.stage1_steps from scratch on minimal puzzles) into outputs/, then stage 2 (cfg) from it."""
    if cfg.stage1_steps <= 0:
        return train(cfg, out, state_path, resume)
    if cfg.init_from:
        raise ValueError(f"init_from={cfg.init_from!r} with stage1_steps={cfg.stage1_steps}: stage 1 starts from "
                         "random init; pass --stage1-steps 0 to start stage 2 from a checkpoint")
    stage1 = replace(cfg, steps=cfg.stage1_steps, **STAGE1_OVERRIDES)
    stage1_dir = state_path.parent / "stage1"
    stage1_state = stage1_dir / "state.pt"
    done = resume and stage1_state.exists() and torch.load(stage1_state, weights_only=False)["step"] >= stage1.steps
    if not done:
        train(stage1, stage1_dir / "checkpoint", stage1_state, resume)
    return train(replace(cfg, init_from=str(stage1_dir / "checkpoint")), out, state_path, resume)


def main(argv: list[str] | None = None) -> None:
    cfg, out, state_path, resume = parse_args(argv)
    two_stage(cfg, out, state_path, resume)


if __name__ == "__main__":
    main()
