"""Evaluate a trained tiny D2F adapter against its base under D2F decoding and write its MODEL_CARD.md.

    python -m dllm_bench.tiny.d2f_card llada [--limit 100]   # runs, eval_results_d2f.json, card
    python -m dllm_bench.tiny.d2f_card llada --card-only      # card from the recorded results

Each setting is one ``python -m dllm_bench.run`` of D2F's preset for the flavour (``policy=pipeline_d2f_<flavour>``,
its committed-block cache) on the held-out Sudoku puzzles, at blocks of 8 and 4, early stop on and off, once with
the adapter (``model=tiny_<flavour>_d2f``) and once with the base checkpoint run the same way (block-causal on the
anchored grid, no adapter); the summaries and exact commands go to ``eval_results_d2f.json`` beside the adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

from dllm_bench.models.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from dllm_bench.tiny.card_runs import CHECKPOINTS, card_main, run_settings
from dllm_bench.tiny.model_card import _loss_curve, _solution_spread

FLAVOURS = ("llada", "dream")
BLOCKS = (8, 4)
RESULTS = "eval_results_d2f.json"


def _commands(flavour: str, limit: int) -> list[dict]:
    """Each recorded setting: which model, block, early stop, and its CLI arguments."""
    models = {"adapter": [f"model=tiny_{flavour}_d2f"],
              "base": [f"model=tiny_{flavour}", "model.attention=block_causal", "model.block_grid=anchored"]}
    out = []
    for which, model in models.items():
        for block in BLOCKS:
            for stop in (True, False):
                out.append({"model": which, "block_length": block, "early_stop": stop, "args": [
                    *model, f"policy=pipeline_d2f_{flavour}", "cache=committed_blocks", "task=sudoku",
                    f"block_length={block}", "gen_length=24", f"limit={limit}", "batch_size=50", "seed=0",
                    f"early_stop={str(stop).lower()}"]})
    return out


def evaluate(flavour: str, limit: int) -> Path:
    """Run every setting; write eval_results_d2f.json; returns its path."""
    rows = run_settings(({k: setting[k] for k in ("model", "block_length", "early_stop")}, setting["args"])
                        for setting in _commands(flavour, limit))
    path = CHECKPOINTS / f"tiny_{flavour}_d2f" / RESULTS
    path.write_text(json.dumps({"flavour": flavour, "results": rows}, indent=1) + "\n")
    return path


def _table(rows: list[dict]) -> str:
    lines = ["| weights | block | early stop | puzzles | solved % (95 % CI) | mean NFE | forward positions / puzzle "
             "| tokens/forward | wall s | CPU s |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['block_length']} | {'on' if r['early_stop'] else 'off'} | {r['puzzles']} "
              f"| {100 * r['accuracy']:.1f} ({100 * r['ci'][0]:.1f}–{100 * r['ci'][1]:.1f}) | {r['nfe_mean']:.2f} "
              f"| {r['forward_positions_mean']:.1f} | {r['tokens_per_forward']:.2f} | {r['wall_s']:.0f} "
              f"| {r['cpu_s']:.0f} |" for r in rows]
    return "\n".join(lines)


def _early_stop_note(rows: list[dict]) -> list[str]:
    """A line saying so when early stop changed no setting's figures (D2F adds no block after an EOS)."""
    keys = ("accuracy", "nfe_mean", "forward_positions_mean")
    pairs = {(r["model"], r["block_length"]): [] for r in rows}
    for r in rows:
        pairs[(r["model"], r["block_length"])].append(tuple(r[k] for k in keys))
    if not all(len(set(v)) == 1 for v in pairs.values()):
        return []
    return ["Early stop changes no figure: D2F's pipeline adds no block after an EOS is committed, and the "
            "positions never added are returned as EOS.", ""]


def render(flavour: str) -> str:
    """The card's markdown from train_log.json, adapter_config.json and eval_results_d2f.json."""
    directory = CHECKPOINTS / f"tiny_{flavour}_d2f"
    log = json.loads((directory / "train_log.json").read_text())
    acfg = json.loads((directory / ADAPTER_CONFIG).read_text())
    tc = log["config"]
    evals = json.loads((directory / RESULTS).read_text())["results"]
    size_kb = (directory / ADAPTER_WEIGHTS).stat().st_size / 1024
    published = {"llada": "LLaDA-8B-Instruct", "dream": "Dream-v0-Base-7B"}[flavour]
    teacher = ("the base model's own distributions (adapter off, full attention over the same noisy sequence: "
               "D2F's `self_align`, the setting of both its training configs)" if tc["targets"] == "teacher"
               else "the answer tokens")
    return "\n".join([
        f"# tiny_{flavour}_d2f: a trained D2F LoRA on the tiny {flavour.capitalize()} for 4×4 Sudoku",
        "",
        f"A Discrete Diffusion Forcing adapter in the exact format D2F ships on {published} (PEFT LoRA: "
        f"`{ADAPTER_CONFIG}` + `{ADAPTER_WEIGHTS}`), trained on the tiny task so that D2F decoding on it means "
        f"something. `load_model(\"dllm_bench/tiny/checkpoints/tiny_{flavour}_d2f\")` loads the base it names "
        f"(`{acfg['base_model_name_or_path']}`) with the adapter merged; `model=tiny_{flavour}_d2f` runs it "
        "block-causal on the anchored grid, as D2F's eval does.",
        "",
        "## Format",
        f"- PEFT LoRA, r {acfg['r']}, lora_alpha {acfg['lora_alpha']} (scale 1, as D2F's r 32 / alpha 32), target "
        f"modules {', '.join(f'`{m}`' for m in acfg['target_modules'])} in every layer (D2F's, by the base's tensor "
        f"names); tensors `base_model.model.<module>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r], float32, "
        f"{log['trainable_parameters']} parameters, {size_kb:.0f} KB.",
        "",
        "## Task",
        "4×4 Sudoku (task `sudoku`), the base model's task (its card: "
        f"`tiny_{flavour}/MODEL_CARD.md`): most puzzles have several valid completions ({_solution_spread()}); "
        "solved = a valid grid keeping every clue.",
        "",
        "## Training",
        f"- Command: `{log['command']}` (seed {tc['seed']}); {tc['steps']} steps of batch {tc['batch_size']}, AdamW "
        f"lr {tc['lr']} (betas 0.9 / 0.95, warm-up {tc['warmup_steps']}, cosine to {tc['min_lr_ratio']}×), weight "
        f"decay {tc['weight_decay']}, grad clip {tc['grad_clip']}, {tc['threads']} CPU thread(s), torch {log['torch']}.",
        f"- Retrain: `python -m dllm_bench.tiny.train_d2f --flavour {flavour}` (its defaults are the settings above) "
        "writes the adapter here; the run above wrote it to its `--out` and it was copied here unchanged.",
        f"- Time: wall clock {log['wall_seconds'] / 60:.1f} min, CPU time of the training process "
        f"{log['cpu_seconds'] / 60:.1f} min" + (" (the 2-core machine was shared with other jobs: the wall clock is "
                                                "mostly waiting)." if log["cpu_seconds"] < log["wall_seconds"] / 2 else "."),
        "- Objective: D2F's (`tiny/d2f_objective.py`; SJTU-DENG-Lab/Discrete-Diffusion-Forcing D2F-train): the "
        f"answer ({tc['gen_length']} tokens, EOS-padded) cut into blocks from the prompt's end, the block size drawn "
        f"per batch from {tc['block_sizes']} (D2F trains one size, 16; the tiny decodes use 4 and 8); block k masked "
        "with a ratio that never decreases along the answer (the first in [0.2, 0.7), at most 0.7); one forward under "
        "the block-causal mask (prompt → prompt; a block → the prompt, the blocks before it, itself), so each block "
        "sees the noisy blocks before it; cross-entropy on the masked answer tokens / ratio, averaged over them, "
        f"against {teacher}. The base stays frozen. No LoRA dropout (D2F: 0.1).",
        "",
        "### Loss curve",
        _loss_curve(log),
        "",
        "## Evaluation (decoding engine, held-out puzzles)",
        "",
        f"D2F's preset (`policy=pipeline_d2f_{flavour}`, its committed-block cache) scaled to the 24-token answer, with "
        "the adapter and with the base run the same way (block-causal on the anchored grid, no adapter); greedy, "
        f"batch 50, {evals[0]['device']}, {evals[0]['date_utc'][:16]} UTC. NFE = forwards per puzzle, forward "
        "positions = query positions run per puzzle (the runner's counts); wall and CPU seconds of the whole run on "
        "the shared machine. Commands:",
        "",
        *[f"- `{r['command']}`" for r in evals],
        "",
        _table(evals),
        "",
        *_early_stop_note(evals),
        "## Limitations",
        "- A toy for comparing decoders on D2F's exact adapter format, not a language model; blocks of 4 and 8 (D2F's "
        "evals use 32 and 64) because the 24-token answer leaves few blocks otherwise.",
        "",
    ])


def main(argv: list[str] | None = None) -> None:
    card_main(__doc__.splitlines()[0], "flavour", FLAVOURS, evaluate, render,
              lambda flavour: CHECKPOINTS / f"tiny_{flavour}_d2f", argv)


if __name__ == "__main__":
    main()
