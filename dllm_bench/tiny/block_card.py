"""Evaluate a tiny block-diffusion checkpoint with its policy preset and write its MODEL_CARD.md.

    python -m dllm_bench.tiny.block_card fast_dllm_v2 [--limit 100]   # runs, eval_results_block.json, card
    python -m dllm_bench.tiny.block_card fast_dllm_v2 --card-only      # card from the recorded results

Each setting is one ``python -m dllm_bench.run`` of the model's preset on the held-out Sudoku puzzles, with early
stop on and off; the summaries (accuracy, NFE, forward positions) and the exact commands go to
``eval_results_block.json`` beside the weights, and the card is rendered from it and ``train_log.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from dllm_bench.tiny.card_runs import CHECKPOINTS, card_main, run_settings
from dllm_bench.tiny.model_card import _loss_curve, _run_line, _solution_spread

# per format: what the checkpoint is, and its published policy preset scaled to the tiny model's block of 4
FORMATS = {
    "fast_dllm_v2": {
        "schema": "Fast-dLLM v2 (`architectures [\"Fast_dLLM_QwenForCausalLM\"]`, `model_type \"Fast_dLLM_Qwen\"`, "
                  "Qwen2 tensors `model.layers.N.*` with q/k/v biases, grouped-query attention, `bd_size`; logits at i "
                  "predict token i + 1, as Dream's)",
        "preset": ["policy=fast_dllm_v2", "policy.sub_block=2"],
        "preset_text": "Fast-dLLM v2's preset (`batch_sample`'s threshold 0.95, committed-block K/V whose store forward "
                       "gives the next block's first token) with sub-blocks of 2 in the block of 4 (published: 8 of 32)",
    },
    "sdar": {
        "schema": "SDAR (`architectures [\"SDARForCausalLM\"]`, Qwen3 tensors with qk-norm, `head_dim`, `block_size`; "
                  "logits at i predict token i)",
        "preset": ["policy=sdar"],
        "preset_text": "SDAR's README preset (block 4, 4 denoising steps, threshold 0.9, committed-block K/V)",
    },
    "llada2": {
        "schema": "LLaDA2.0 (`architectures [\"LLaDA2MoeModelLM\"]`, `model_type \"llada2_moe\"`: fused QKV, qk-norm, "
                  "partial RoPE, a dense first layer, then MoE layers with grouped sigmoid routing, expert bias and one "
                  "shared expert; logits at i predict token i)",
        "preset": ["policy=llada2", "policy.steps=4"],
        "preset_text": "LLaDA2.0's preset (threshold 0.95 else the scheduled top k, no K/V cache) with 4 steps per block "
                       "of 4 (published: 32 per block of 32)",
    },
}


def _commands(fmt: str, limit: int) -> list[tuple[bool, list[str]]]:
    """(early_stop, CLI arguments) of each recorded setting."""
    base = [f"model=tiny_{fmt}", *FORMATS[fmt]["preset"], "task=sudoku", "block_length=4", "gen_length=24",
            f"limit={limit}", "batch_size=50", "seed=0"]
    return [(stop, [*base, f"early_stop={str(stop).lower()}"]) for stop in (True, False)]


def evaluate(fmt: str, limit: int) -> Path:
    """Run every setting; write eval_results_block.json; returns its path."""
    rows = run_settings(({"early_stop": stop}, args) for stop, args in _commands(fmt, limit))
    path = CHECKPOINTS / f"tiny_{fmt}" / "eval_results_block.json"
    path.write_text(json.dumps({"format": fmt, "results": rows}, indent=1) + "\n")
    return path


def _table(rows: list[dict]) -> str:
    lines = ["| early stop | puzzles | solved % (95 % CI) | mean NFE | forward positions / puzzle | tokens/forward | wall s | CPU s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {'on' if r['early_stop'] else 'off'} | {r['puzzles']} | {100 * r['accuracy']:.1f} "
              f"({100 * r['ci'][0]:.1f}–{100 * r['ci'][1]:.1f}) | {r['nfe_mean']:.2f} | {r['forward_positions_mean']:.1f} "
              f"| {r['tokens_per_forward']:.2f} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} |" for r in rows]
    return "\n".join(lines)


def _training_lines(log: dict) -> list[str]:
    """One line per run (stage 1 from the init log when present) and the total wall clock and CPU time."""
    runs = [log["init_log"], log] if log.get("init_log") else [log]
    names = ["Stage 1, from random init", "Stage 2, from the stage-1 weights"] if len(runs) == 2 else ["Command"]
    wall, cpu = sum(r["wall_seconds"] for r in runs), sum(r["cpu_seconds"] for r in runs)
    return [f"- {name}: {_run_line(r)}." for name, r in zip(names, runs)] + [
        f"- Total: wall clock {wall / 60:.1f} min, CPU time of the training process{'es' if len(runs) > 1 else ''} "
        f"{cpu / 60:.1f} min" + (" (the 2-core machine was shared with other jobs: the wall clock is mostly waiting)."
                                  if cpu < wall / 2 else ".")]


def render(fmt: str) -> str:
    """The card's markdown text from train_log.json, config.json and eval_results_block.json."""
    directory = CHECKPOINTS / f"tiny_{fmt}"
    log = json.loads((directory / "train_log.json").read_text())
    cfg = json.loads((directory / "config.json").read_text())
    tc = log["config"]
    block = cfg.get("bd_size", cfg.get("block_size"))
    size_kb = (directory / "model.safetensors").stat().st_size / 1024
    moe = (f" {cfg['num_experts']} experts of {cfg['moe_intermediate_size']}, top {cfg['num_experts_per_tok']} in "
           f"{cfg['n_group']} groups, 1 shared expert, first {cfg['first_k_dense_replace']} layer dense (MLP "
           f"{cfg['intermediate_size']});" if fmt == "llada2" else f" MLP {cfg['intermediate_size']};")
    evals = json.loads((directory / "eval_results_block.json").read_text())["results"]
    parts = [
        f"# tiny_{fmt}: a trained {log['parameters'] / 1e6:.2f} M-parameter block-diffusion LM for 4×4 Sudoku",
        "",
        f"A block-diffusion model in the exact {fmt} checkpoint format, trained on the tiny Sudoku task so that its "
        "decoders' accuracy means something (the `random_*` checkpoints are the untrained ones). Load it like any real "
        "checkpoint: `load_model(\"dllm_bench/tiny/checkpoints/tiny_" + fmt + "\")`, or `model=tiny_" + fmt + "`.",
        "",
        "## Format",
        f"- Schema: {FORMATS[fmt]['schema']}; the key set of the published config.json "
        f"(`models/tiny_blocks.py`), sized down: hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, "
        f"{cfg['num_attention_heads']} heads / {cfg['num_key_value_heads']} K/V heads,{moe} vocab {cfg['vocab_size']}, "
        f"rope_theta {cfg['rope_theta']}, block {block} (block-causal attention on the absolute grid); float32 weights, "
        f"{size_kb:.0f} KB.",
        "- Tokenizer: character level over printable ASCII with the format's special tokens (mask "
        f"`{cfg['mask_token_id']}`) and its chat template, as the random checkpoint of the format has.",
        "",
        "## Task",
        "4×4 Sudoku (task `sudoku`), the tiny LLaDA's task (its card: `tiny_llada/MODEL_CARD.md`): the puzzle in the "
        "chat template, the answer is 16 digits row by row then the end tokens; puzzles keep 2–6 random clues, so most "
        f"have several valid completions ({_solution_spread()}); solved = a valid grid keeping every clue.",
        "",
        "## Training",
        *_training_lines(log),
        "- Objective: the block-diffusion form of LLaDA's masked-diffusion SFT (`objective.block_diffusion_batch`, "
        "as SDAR and Fast-dLLM v2 train): the sequence's blocks on the absolute grid are each noised with their own "
        f"t ~ U(0, 1) (answer tokens masked w.p. (1 − ε)t + ε, ε = {tc['eps']}); one forward sees the noised copy and "
        "the clean copy at the same positions, each noised block attending its own noised tokens and the clean blocks "
        "before it; cross-entropy on masked answer tokens weighted by 1/p, divided by the answer length. "
        + ("With the shifted prediction, a token's logits come from the state before it: inside its block from the "
           "noised copy, across a block boundary from the clean previous block (as the decoder's store forward gives "
           "the next block's first token). " if cfg.get("architectures", [""])[0].startswith("Fast") else "")
        + "Targets: for the 16 cells, the exact posterior digit marginals given the clues, the earlier blocks' cells "
        "and the cell's own block's unmasked cells (`--targets posterior`); the end tokens themselves. Answers "
        f"EOS-padded to a length drawn per batch from {sorted(set(tc['answer_lengths']))}.",
        *(["- Routing: no auxiliary loss; LLaDA2's auxiliary-loss-free balancing (`moe_router_enable_expert_bias`): "
           f"after every step each MoE layer's expert bias moves by {tc['expert_bias_update_rate']} towards balance."]
          if fmt == "llada2" else []),
        "",
        "### Loss curve",
        _loss_curve(log),
        "",
        "## Evaluation (decoding engine, held-out puzzles)",
        "",
        f"{FORMATS[fmt]['preset_text']}; greedy, batch 50, {evals[0]['device']}, {evals[0]['date_utc'][:16]} UTC. "
        "NFE = forwards per puzzle, forward positions = query positions run per puzzle (the runner's counts); wall "
        "and CPU seconds of the whole run on the shared machine. Commands:",
        "",
        *[f"- `{r['command']}`" for r in evals],
        "",
        _table(evals),
        "",
        "## Limitations",
        "- A toy for comparing decoders on the format's exact network, not a language model; block 4 (the published "
        "models use 32, SDAR 4) because the 24-token answer leaves few blocks otherwise.",
        "",
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    card_main(__doc__.splitlines()[0], "format", FORMATS, evaluate, render, lambda fmt: CHECKPOINTS / f"tiny_{fmt}",
              argv)


if __name__ == "__main__":
    main()
