"""What every paper-table cell runs, pinned as data written here (issue 13): policy, rule and parameters, cache and
its intervals, lengths, counting rule, scoring, confidence precision (issue 23). Each cell of dllm_bench/report/table_specs/ is composed as the runner would compose
it and compared with these expectations; docs/cells.md shows the same listing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dllm_bench.report.cells import cells_document, semantics
from dllm_bench.report.runs import compose_configs
from dllm_bench.report.tables import TABLES, table_cells

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cells.md"

# the published SlowFast hyperparameters (upstream_semantics.md section 4): paper fills the cell, code beside it
SF_PAPER = ("slowfast(explore_steps=8, converge_threshold=0.1, stability_window=2, stability_threshold=1.0, threshold=0.85, "
            "explore_threshold=null, min_parallel=2, flavour=llada, truncate_fast=true)")
SF_CODE = ("slowfast(explore_steps=6, converge_threshold=0.3, stability_window=2, stability_threshold=1.0, threshold=0.9, "
           "explore_threshold=null, min_parallel=2, flavour=llada, truncate_fast=true)")
SF_DREAM_CODE = ("slowfast(explore_steps=6, converge_threshold=0.1, stability_window=2, stability_threshold=1.0, threshold=0.9, "
                 "explore_threshold=0.8, min_parallel=2, flavour=dream, truncate_fast=true)")
SF_DREAM_PAPER = SF_DREAM_CODE.replace("explore_steps=6", "explore_steps=8").replace("threshold=0.9", "threshold=0.85")
TOPK = "topk(remasking=low_confidence)"
PREFIX = "prefix(refresh_every=null, compat_first_token=false)"
DUAL = "dual(refresh_every=null, compat_first_token=false)"
DREAM_PREFIX = "prefix(refresh_every=null, compat_first_token=true)"
ADAPTIVE = "blocks(steps=null)"
FIXED = "blocks(steps={gen})"
TAU = "threshold(threshold=0.9)"
DLLM = "dllm(prompt_interval={kp}, response_interval={kr}, verify_ratio={rho}, layer0_always=true, verify_compat=false)"
# SlowFast + dLLM-Cache per-task K_p / K_r / rho of the SlowFast scripts (upstream_semantics.md section 3)
SF_CACHE = {"GSM8K": (15, 1, 0.0), "GPQA": (15, 5, 0.25), "HumanEval": (10, 1, 0.0), "MBPP": (5, 1, 0.0),
            "BBH": (5, 1, 0.0), "MATH": (15, 1, 0.0), "MMLU": (15, 1, 0.0)}

# table -> column (or row) label -> (policy, rule, cache, block length); {gen} = the cell's generation length
EXPECTED: dict[str, dict[str, tuple[str, str, str, str]]] = {
    "fast_dllm_t1": {"LLaDA": (FIXED, TOPK, "none", "32"), "+Cache": (FIXED, TOPK, PREFIX, "32"),
                     "+Parallel": (ADAPTIVE, TAU, "none", "32"), "Fast-dLLM": (ADAPTIVE, TAU, PREFIX, "32")},
    "fast_dllm_t2": {  # 13.6: Dream's own entropy decoder; Fast-dLLM's Dream confidence_threshold; blocked cache loop
        "Dream": ("dream(steps={gen}, alg=entropy, eps=0.001)", "none", "none", "{gen}"),
        # the release's eval_gsm8k.sh: +Cache runs alg=entropy (negative-entropy ranking) with steps = gen_length;
        # +Parallel runs diffusion_steps = gen_length / 32 (a quota of 32 positions a step)
        "+Cache": (FIXED, "topk(remasking=entropy)", DREAM_PREFIX, "32"),
        "+Parallel": ("dream_threshold(steps={gen32}, threshold=0.9)", "none", "none", "{gen}"),
        "Fast-dLLM": (ADAPTIVE, TAU, DREAM_PREFIX, "32")},
    **{t: {"LLaDA": (FIXED, TOPK, "none", "32"), "Parallel, No cache": (ADAPTIVE, TAU, "none", "32"),
           "Parallel, PrefixCache": (ADAPTIVE, TAU, PREFIX, "32"), "Parallel, DualCache": (ADAPTIVE, TAU, DUAL, "32")}
       for t in ("fast_dllm_t3", "fast_dllm_t4")},
    **{t: {"Threshold": (ADAPTIVE, TAU, "{cache}", "32"), "Factor": (ADAPTIVE, "factor(f={f}, compat=true)", "{cache}", "32"),
           "Fréchet": (ADAPTIVE, "frechet(delta=0.25)", "{cache}", "32")}
       for t in ("fast_dllm_pp_t1", "fast_dllm_pp_t2", "fast_dllm_pp_t4", "fast_dllm_pp_t5")},
    "fast_dllm_pp_t3": {  # 13.8: the LLaDA-V "Fast-dLLM" row is factor f = 1
        "Full Steps": ("blocks(steps={full})", TOPK, "none", "{gen}"),
        "Half Steps": ("blocks(steps={half})", TOPK, "none", "{gen}"),
        "Fast-dLLM": (ADAPTIVE, "factor(f=1.0, compat=true)", "prefix(refresh_every=32, compat_first_token=false)", "{gen}"),
        "Ours (Fréchet)": (ADAPTIVE, "frechet(delta=0.25)", "prefix(refresh_every=32, compat_first_token=false)", "{gen}")},
    "slowfast_t1": {"LLaDA Base": (FIXED, TOPK, "none", "{gen}"),
                    "LLaDA + Sampling [paper preset]": (SF_PAPER, "none", "none", "{gen}"),
                    "LLaDA + Sampling [code preset]": (SF_CODE, "none", "none", "{gen}"),
                    "Dream Base": ("dream(steps={gen}, alg=entropy, eps=0.001)", "none", "none", "{gen}"),
                    "Dream + Sampling [paper preset]": (SF_DREAM_PAPER, "none", "none", "{gen}"),
                    "Dream + Sampling [code preset]": (SF_DREAM_CODE, "none", "none", "{gen}")},
    "slowfast_t2": {"LLaDA Base": (FIXED, TOPK, "none", "{gen}"),  # 13.4: SlowFast + dLLM-Cache, truncated
                    "LLaDA + Sampling + Cache [paper preset]": (SF_PAPER, "none", DLLM, "{gen}"),
                    "LLaDA + Sampling + Cache [code preset]": (SF_CODE, "none", DLLM, "{gen}")},
    "slowfast_t3": {"Autoregressive": (FIXED, TOPK, "none", "1"), "Base": (FIXED, TOPK, "none", "{gen}"),
                    "Semi-Autoregressive": (FIXED, TOPK, "none", "32"),
                    "+ Sampling [paper preset]": (SF_PAPER, "none", "none", "{gen}"),
                    "+ Sampling [code preset]": (SF_CODE, "none", "none", "{gen}")},
    "slowfast_t4": {"LLaDA-8B-Base Base": (FIXED, TOPK, "none", "{gen}"),
                    "LLaDA-8B-Base + Sampling [paper preset]": (SF_PAPER, "none", "none", "{gen}"),
                    "LLaDA-8B-Base + Sampling [code preset]": (SF_CODE, "none", "none", "{gen}"),
                    **{f"LLaDA-8B-Base + Sampling + Cache (Kp={kp};Kr={kr}) [{p} preset]":
                       (SF_PAPER if p == "paper" else SF_CODE, "none",
                        f"dllm(prompt_interval={kp}, response_interval={kr}, verify_ratio=0.25, layer0_always=true, "
                        "verify_compat=false)",
                        "{gen}") for kp, kr in ((100, 5), (500, 30)) for p in ("paper", "code")}},
}


def count_rule(table: str, row: str, col: str) -> str:
    """13.7: Fast-dLLM T1 HumanEval counts the canvas; Fast-dLLM++ HumanEval and Dream cells count answer ids
    != EOS; SlowFast's Dream cells the full gen_length; everything else cuts at the stop string."""
    dream = table in ("fast_dllm_t2", "fast_dllm_pp_t4") or col.startswith("Dream")
    if table.startswith("slowfast") and dream:
        return "all"
    if dream or (table.startswith("fast_dllm_pp") and row.startswith("HumanEval")):
        return "nonstop"
    if table == "fast_dllm_t1" and row.startswith("HumanEval"):
        return "canvas"
    return "cut"


def confidence_precision(table: str, col: str) -> str:
    """The dtype of the published loop's confidence softmax: float64 in the LLaDA loops of Fast-dLLM
    (llada/generate.py), Fast-dLLM++ (v1/llada/generate.py) and its LLaDA-V hook; the logits' own dtype ("model")
    in every Dream loop (Dream's sample_tokens, as Fast-dLLM's and Fast-dLLM++'s copies) and in both SlowFast loops
    (sampling_utils: softmax(logits) on bf16 logits, LLaDA and Dream)."""
    dream = table in ("fast_dllm_t2", "fast_dllm_pp_t4") or col.startswith("Dream")
    return "model" if dream or table.startswith("slowfast") else "float64"


def expected_for(table: str, cell, config) -> dict[str, str]:
    labels = EXPECTED[table]
    key = cell.col[0] if cell.col[0] in labels else cell.row[0]
    policy, rule, cache, block = labels[key]
    gen = config["gen_length"]
    kp, kr, rho = SF_CACHE.get(cell.row[0], (None, None, None))
    params = {"gen": gen, "gen32": gen // 32, "full": gen // 2, "half": gen // 4, "kp": kp, "kr": kr, "rho": rho,
              "f": cell.published.params().get("f") if cell.published else None}
    if "{cache}" in cache:
        cache_name = config["cache"]["name"]
        first = "true" if table == "fast_dllm_pp_t4" else "false"  # Dream + cache: the published first-token commit
        cache = "none" if cache_name == "none" else f"{cache_name}(refresh_every=null, compat_first_token={first})"
    return {"policy": policy.format(**params), "rule": rule.format(**params), "cache": cache.format(**params),
            "lengths": f"{gen}/{block.format(**params)}", "count_rule": count_rule(table, cell.row[0], cell.col[0]),
            "scoring": "paper", "confidence": confidence_precision(table, cell.col[0])}


@pytest.mark.parametrize("table", sorted(EXPECTED))
def test_every_cell_runs_what_the_published_code_ran(table):
    spec = TABLES[table]
    cells = [c for c in table_cells(spec) if c.unavailable is None]
    configs = compose_configs([(spec.preset, c.overrides) for c in cells])
    assert cells
    for cell, config in zip(cells, configs):
        got = semantics(config, cell.scoring)
        assert got == expected_for(table, cell, config), f"{table}: {cell.row[0]} | {cell.col[0]}"


def test_every_paper_table_is_pinned():
    # the field table (its own published file) runs each method at its rule's defaults, pinned by the rules' goldens
    assert set(EXPECTED) == {name for name, spec in TABLES.items() if spec.paper and spec.published_file is None}


def test_slowfast_cells_run_both_presets_labelled():
    for name in ("slowfast_t1", "slowfast_t2", "slowfast_t3", "slowfast_t4"):
        cells = table_cells(TABLES[name])
        paper = [c for c in cells if "[paper preset]" in c.row[0] + c.col[0]]
        code = [c for c in cells if "[code preset]" in c.row[0] + c.col[0]]
        assert paper and len(paper) == len(code), name
        assert all(c.published is not None for c in paper) and all(c.published is None for c in code), name


def test_docs_show_the_same_cell_list():
    assert DOCS.read_text(encoding="utf-8") == cells_document(), "regenerate: python scripts/reproduce_table.py --cells --write"
