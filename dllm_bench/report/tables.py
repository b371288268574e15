"""The reproducible tables: paper layout (rows, columns, metrics) and each cell's exact run settings.

Each published table has a preset `conf/experiment/<name>.yaml` (table-wide settings) and, per printed cell,
the Hydra overrides that select that cell's run (`cell.overrides`), derived from its published row.
Settings the paper leaves unstated are filled from the published code and listed in `cell.assumptions`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from dllm_bench.report.published import PublishedRow, load_published
from dllm_bench.runner.config import CONF_DIR

# Harness option for each model/task named in the published CSV (None: not something this harness runs).
MODEL_OPTIONS: dict[str, str | None] = {
    "LLaDA-8B-Instruct": "llada_8b_instruct",
    "LLaDA-8B-Base": "llada_8b_base",
    "Dream-v0-Base-7B": "dream_7b_base",
    "LLaDA-V": "llada_v",
    "LLaMA3-8B": None,
}
TASK_OPTIONS = {
    "gsm8k": "gsm8k", "math": "minerva_math", "humaneval": "humaneval", "mbpp": "mbpp",
    "mathvista": "mathvista", "mathverse": "mathverse",
    "gpqa": "gpqa_main", "bbh": "bbh", "mmlu": "mmlu", "mmlu_pro": "mmlu_pro",
}
TASK_LABELS = {
    "gsm8k": "GSM8K", "math": "MATH", "humaneval": "HumanEval", "mbpp": "MBPP", "mathvista": "MathVista",
    "mathverse": "MathVerse", "gpqa": "GPQA", "bbh": "BBH", "mmlu": "MMLU", "mmlu_pro": "MMLU-Pro",
    "sudoku": "Sudoku 4x4",
}
# SlowFast repo scripts' shots (upstream_semantics.md section 5): the paper states none.
SLOWFAST_SHOTS = {"gsm8k": 4, "gpqa": 5, "humaneval": 0, "mbpp": 3, "math": 4, "bbh": 3, "mmlu": 5, "mmlu_pro": 0}
# dLLM-Cache (K_p, K_r, rho) the SlowFast+cache runs used per task (upstream_semantics.md section 3).
SLOWFAST_DLLM_CACHE = {
    "gsm8k": (15, 1, 0.0), "gpqa": (15, 5, 0.25), "humaneval": (10, 1, 0.0), "mbpp": (5, 1, 0.0),
    "bbh": (5, 1, 0.0), "math": (15, 1, 0.0), "mmlu": (15, 1, 0.0),
}
# LLaDA-V eval settings (upstream_semantics.md section 5): gen = block length and steps.
LLADA_V_SETTINGS = {"mathvista": (96, 48), "mathverse": (64, 32)}
# Number of evaluation documents of each benchmark's test split as the papers ran them (for GPU-hour estimates).
BENCHMARK_SIZES = {
    "gsm8k": 1319, "math": 5000, "humaneval": 164, "mbpp": 500, "mathvista": 1000, "mathverse": 788,
    "gpqa": 448, "bbh": 6511, "mmlu": 14042, "mmlu_pro": 12032,
}

METRIC_LABELS = {
    "accuracy": "Acc. (%)",
    "tokens_per_s": "Tok/s",
    "nfe": "NFE",
    "speedup": "Speedup (x)",
    "tokens_per_forward": "Tok/NFE",
    "nfe_mean": "NFE/sample",
}


@dataclass(frozen=True)
class Cell:
    """One cell group of a table: its layout key, the published row (if any) and the run that fills it."""

    row: tuple[str, ...]
    col: tuple[str, ...]
    published: PublishedRow | None
    overrides: dict[str, Any]
    unavailable: str | None = None
    assumptions: tuple[str, ...] = ()

    @property
    def layout(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(row key, column key) of the cell in the table grid."""
        return self.row, self.col


@dataclass(frozen=True)
class TableSpec:
    """A table as printed: its rows, columns, metrics, reference cell for speedups and the preset to run."""

    name: str
    title: str
    row_fields: tuple[str, ...]
    col_fields: tuple[str, ...]
    metrics: tuple[str, ...]
    paper: str | None = None
    table: str | None = None
    speedup_ref: dict[str, str] = field(default_factory=dict)
    row_label: Callable[[tuple[str, ...]], str] | None = None
    col_label: Callable[[tuple[str, ...]], str] | None = None
    row_header: str = "Setting"
    needs_gpu: bool = True

    @property
    def preset(self) -> str:
        """`experiment=<preset>` selects the table's conf/experiment file."""
        return self.name

    def label_row(self, key: tuple[str, ...]) -> str:
        return self.row_label(key) if self.row_label else " ".join(k for k in key if k)

    def label_col(self, key: tuple[str, ...]) -> str:
        return self.col_label(key) if self.col_label else " ".join(k for k in key if k)


def _task_len(key: tuple[str, ...]) -> str:
    task, shots, length = key
    shot_text = f", {shots}-shot" if shots else ""
    return f"{TASK_LABELS.get(task, task)} ({length}{shot_text})"


_FAST_DLLM_COLS = {
    ("baseline", "none"): "LLaDA",
    ("baseline", "prefix"): "+Cache",
    ("parallel", "none"): "+Parallel",
    ("fast-dllm", "prefix"): "Fast-dLLM",
    ("fast-dllm", "dual"): "DualCache",
}
_CACHE_LABELS = {"none": "No cache", "prefix": "PrefixCache", "dual": "DualCache", "dllm_cache": "dLLM-Cache"}
_SELECTOR_LABELS = {"threshold": "Threshold", "factor": "Factor", "frechet": "Fréchet"}


def _fast_dllm_col(model: str) -> Callable[[tuple[str, ...]], str]:
    def label(key: tuple[str, ...]) -> str:
        text = _FAST_DLLM_COLS.get(key, " ".join(key))
        return "Dream" if (text == "LLaDA" and model == "dream") else text

    return label


def _fast_dllm_34_col(key: tuple[str, ...]) -> str:
    method, cache = key
    return "LLaDA" if method == "baseline" else f"Parallel, {_CACHE_LABELS[cache]}"


def _selector_col(key: tuple[str, ...]) -> str:
    return _SELECTOR_LABELS.get(key[0], key[0])


_SLOWFAST_METHODS = {
    "baseline": "Base", "slowfast": "+ Sampling", "slowfast+dllm_cache": "+ Sampling + Cache",
    "ar": "Autoregressive", "semi_ar": "Semi-Autoregressive",
}


def _slowfast_t1_col(key: tuple[str, ...]) -> str:
    model, method = key
    short = "LLaDA" if model.startswith("LLaDA") else "Dream"
    return f"{short} {_SLOWFAST_METHODS[method]}"


def _slowfast_t4_row(key: tuple[str, ...]) -> str:
    model, method, param = key
    text = f"{model} {_SLOWFAST_METHODS.get(method, method)}"
    return text + (f" ({param})" if param and "Kp" in param else "")


TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        TableSpec(
            "fast_dllm_t1", "Fast-dLLM Table 1: LLaDA-8B-Instruct, four benchmarks, lengths 256/512",
            ("task", "num_fewshot", "gen_length"), ("method", "cache"), ("accuracy", "tokens_per_s", "speedup"),
            "fast-dllm", "Table 1", {"method": "baseline", "cache": "none"}, _task_len, _fast_dllm_col("llada"),
            "Benchmark (length, shots)",
        ),
        TableSpec(
            "fast_dllm_t2", "Fast-dLLM Table 2: Dream-v0-Base-7B, four benchmarks, lengths 256/512",
            ("task", "num_fewshot", "gen_length"), ("method", "cache"), ("accuracy", "tokens_per_s", "speedup"),
            "fast-dllm", "Table 2", {"method": "baseline", "cache": "none"}, _task_len, _fast_dllm_col("dream"),
            "Benchmark (length, shots)",
        ),
        TableSpec(
            "fast_dllm_t3", "Fast-dLLM Table 3: LLaDA GSM8K 5-shot vs 8-shot at length 1024",
            ("num_fewshot",), ("method", "cache"), ("accuracy", "tokens_per_s", "speedup"),
            "fast-dllm", "Table 3", {"method": "baseline", "cache": "none"}, lambda k: f"{k[0]}-shot",
            _fast_dllm_34_col, "GSM8K, length 1024",
        ),
        TableSpec(
            "fast_dllm_t4", "Fast-dLLM Table 4: LLaDA GSM8K 8-shot, generation length 256/512/1024",
            ("gen_length",), ("method", "cache"), ("accuracy", "tokens_per_s", "speedup"),
            "fast-dllm", "Table 4", {"method": "baseline", "cache": "none"}, lambda k: f"length {k[0]}",
            _fast_dllm_34_col, "GSM8K 8-shot",
        ),
        TableSpec(
            "fast_dllm_pp_t1", "Fast-dLLM++ Table 1: LLaDA-8B-Instruct, PrefixCache, block 32",
            ("task", "num_fewshot", "gen_length"), ("method",), ("accuracy", "tokens_per_s", "nfe", "speedup"),
            "fast-dllm-pp", "Table 1", {"method": "threshold"}, _task_len, _selector_col, "Benchmark (length, shots)",
        ),
        TableSpec(
            "fast_dllm_pp_t2", "Fast-dLLM++ Table 2: generation length under 8-shot GSM8K (LLaDA-8B-Instruct)",
            ("gen_length", "cache"), ("method",), ("accuracy", "tokens_per_s", "nfe"),
            "fast-dllm-pp", "Table 2", {}, lambda k: f"length {k[0]}, {_CACHE_LABELS[k[1]]}", _selector_col,
            "GSM8K 8-shot",
        ),
        TableSpec(
            "fast_dllm_pp_t3", "Fast-dLLM++ Table 3: LLaDA-V on MathVista and MathVerse",
            ("task",), ("method",), ("accuracy", "tokens_per_s", "speedup"),
            "fast-dllm-pp", "Table 3", {"method": "baseline"}, lambda k: TASK_LABELS[k[0]],
            lambda k: {"baseline": "Full Steps", "half_steps": "Half Steps", "fast-dllm": "Fast-dLLM",
                       "frechet": "Ours (Fréchet)"}[k[0]],
            "Benchmark",
        ),
        TableSpec(
            "fast_dllm_pp_t4", "Fast-dLLM++ Table 4: Dream-v0-Base-7B, PrefixCache, block 32",
            ("task", "num_fewshot", "gen_length"), ("method",), ("accuracy", "tokens_per_s", "nfe", "speedup"),
            "fast-dllm-pp", "Table 4", {"method": "threshold"}, _task_len, _selector_col, "Benchmark (length, shots)",
        ),
        TableSpec(
            "fast_dllm_pp_t5", "Fast-dLLM++ Table 5: selectors x cache modes, LLaDA-8B GSM8K length 1024",
            ("num_fewshot", "cache"), ("method",), ("accuracy", "tokens_per_s"),
            "fast-dllm-pp", "Table 5", {}, lambda k: f"{k[0]}-shot, {_CACHE_LABELS[k[1]]}", _selector_col,
            "GSM8K, length 1024",
        ),
        TableSpec(
            "slowfast_t1", "SlowFast Table 1: LLaDA-8B-Base and Dream-v0-Base-7B with SlowFast sampling",
            ("task",), ("model", "method"), ("accuracy", "tokens_per_s", "speedup"),
            "slowfast", "Table 1", {"method": "baseline"}, lambda k: TASK_LABELS[k[0]], _slowfast_t1_col, "Benchmark",
        ),
        TableSpec(
            "slowfast_t2", "SlowFast Table 2: LLaDA-8B-Base with SlowFast sampling and dLLM-Cache",
            ("task",), ("method",), ("accuracy", "tokens_per_s", "speedup"),
            "slowfast", "Table 2", {"method": "baseline"}, lambda k: TASK_LABELS[k[0]],
            lambda k: "LLaDA " + _SLOWFAST_METHODS[k[0]], "Benchmark",
        ),
        TableSpec(
            "slowfast_t3", "SlowFast Table 3: sampling strategies (LLaDA-8B-Base, GSM8K, inferred)",
            ("method",), ("task",), ("accuracy", "tokens_per_s"),
            "slowfast", "Table 3", {}, lambda k: _SLOWFAST_METHODS[k[0]], lambda k: TASK_LABELS[k[0]], "Strategy",
        ),
        TableSpec(
            "slowfast_t4", "SlowFast Table 4: LLaDA-8B-Base vs LLaMA3-8B (GPQA 8-shot, length 1024)",
            ("model", "method", "method_param"), ("task",), ("accuracy", "tokens_per_s", "speedup"),
            "slowfast", "Table 4", {"model": "LLaDA-8B-Base", "method": "baseline", "method_param": ""},
            _slowfast_t4_row, lambda k: TASK_LABELS[k[0]], "Model / method",
        ),
        TableSpec(
            "tiny", "Embedded tiny LLaDA on 4x4 Sudoku: selectors x caches (no published counterpart)",
            ("selector",), ("cache",), ("accuracy", "tokens_per_s", "nfe_mean", "tokens_per_forward"),
            speedup_ref={}, row_label=lambda k: TINY_SELECTORS[k[0]], col_label=lambda k: _CACHE_LABELS[k[0]],
            row_header="Selector", needs_gpu=False,
        ),
    )
}

# The tiny table's grid: harness selector option -> its row label, and the caches of its columns.
TINY_SELECTORS = {
    "topk": "Sequential (top-1 per step)",
    "threshold": "Threshold tau=0.9",
    "factor": "Factor f=0.75",
    "frechet": "Fréchet delta=0.25",
    "slowfast_code": "SlowFast (code preset)",
    "oracle": "Oracle (floor)",
}
TINY_CACHES = ("none", "prefix", "dual")


def task_available(task_option: str, conf_dir: Path = CONF_DIR) -> bool:
    """Whether the harness has a config for this task (conf/task/<option>.yaml)."""
    return (conf_dir / "task" / f"{task_option}.yaml").is_file()


def _selector_overrides(method: str, params: dict[str, str]) -> dict[str, Any]:
    if method in ("threshold", "parallel", "fast-dllm"):
        return {"selector": "threshold", "selector.tau": float(params.get("tau", 0.9))}
    if method == "factor":
        return {"selector": "factor", "selector.f": float(params["f"])}
    if method == "frechet":
        return {"selector": "frechet", "selector.delta": float(params.get("delta", 0.25))}
    raise ValueError(f"method={method!r} has no selector mapping")


def _fast_dllm_overrides(row: PublishedRow) -> tuple[dict[str, Any], list[str]]:
    """Fast-dLLM Tables 1-4: LLaDA/Dream baseline (1 token per step), +Parallel threshold, caches."""
    gen = row.integer("gen_length")
    notes: list[str] = []
    if row.integer("block_length") is None:
        notes.append("block length 32 (paper states none for no-cache columns; sec. 4.1 / release default)")
    out: dict[str, Any] = {"gen_length": gen, "block_length": 32}
    if row["method"] == "baseline":
        out.update({"selector": "topk", "steps": gen})
        notes.append("baseline = low-confidence top-k with steps = gen_length (one token per step)")
    else:
        out.update(_selector_overrides(row["method"], row.params()))
        out["steps"] = None
    out["cache"] = row["cache"]
    if row["model"].startswith("Dream") and row["cache"] != "none":
        out["compat.dream_cache_force_first"] = True
    return out, notes


def _fast_dllm_pp_overrides(row: PublishedRow) -> tuple[dict[str, Any], list[str]]:
    """Fast-dLLM++ Tables 1-5 (threshold/factor/Fréchet) and Table 3 (LLaDA-V)."""
    notes: list[str] = []
    if row["table"] == "Table 3":
        gen, full_steps = LLADA_V_SETTINGS[row["task"]]
        notes.append(f"LLaDA-V release settings: gen = block = {gen}, full steps {full_steps} (paper states none)")
        out: dict[str, Any] = {"gen_length": gen, "block_length": gen}
        method = row["method"]
        if method in ("baseline", "half_steps"):
            out.update({"selector": "topk", "steps": full_steps if method == "baseline" else full_steps // 2,
                        "cache": "none"})
        else:
            params = {"delta": "0.25"} if method == "frechet" else {"tau": "0.9"}
            notes.append(f"{method}: {params} and PrefixCache refreshed every 32 steps assumed (paper states none)")
            out.update(_selector_overrides(method, params))
            out.update({"steps": None, "cache": "prefix", "cache.refresh_interval": 32})
        return out, notes
    if row.integer("block_length") is None:
        notes.append("block length 32 (not stated; Table 2 prints the same runs with block 32)")
    out = {"gen_length": row.integer("gen_length"), "block_length": 32, "steps": None, "cache": row["cache"]}
    out.update(_selector_overrides(row["method"], row.params()))
    if row["method"] == "factor":
        out["compat.factor_rule"] = "code"
    return out, notes


def _slowfast_overrides(row: PublishedRow) -> tuple[dict[str, Any], list[str]]:
    """SlowFast Tables 1-4: gen = block = 256 (1024 in Table 4), shots from the repo scripts."""
    notes: list[str] = []
    gen = row.integer("gen_length") or 256
    if row.integer("gen_length") is None:
        notes.append("gen = block = 256 from the SlowFast scripts (paper states none)")
    out: dict[str, Any] = {"gen_length": gen, "block_length": gen, "cache": "none"}
    method = row["method"]
    dream = row["model"].startswith("Dream")
    if method == "baseline":
        if dream:
            out.update({"selector": "dream_entropy", "steps": gen})
            notes.append("Dream baseline = Dream's diffusion_generate (alg entropy), steps = gen_length")
        else:
            out.update({"selector": "topk", "steps": gen})
    elif method == "ar":
        out.update({"selector": "topk", "steps": gen, "block_length": 1})
        notes.append("autoregressive = block length 1, one token per step")
    elif method == "semi_ar":
        out.update({"selector": "topk", "steps": gen, "block_length": 32})
        notes.append("semi-autoregressive = block length 32 (not stated)")
    elif method.startswith("slowfast"):
        out.update({"selector": "slowfast_paper", "steps": None})
        if method == "slowfast+dllm_cache":
            params = row.params()
            if params:
                out.update({"cache": "dllm_cache", "cache.prompt_interval": int(params["Kp"]),
                            "cache.response_interval": int(params["Kr"])})
                notes.append("dLLM-Cache rho not stated: harness default")
            else:
                kp, kr, rho = SLOWFAST_DLLM_CACHE.get(row["task"], (None, None, None))
                out["cache"] = "dllm_cache"
                if kp is not None:
                    out.update({"cache.prompt_interval": kp, "cache.response_interval": kr, "cache.verify_ratio": rho})
                    notes.append(f"dLLM-Cache K_p={kp}, K_r={kr}, rho={rho} from the SlowFast scripts (not in paper)")
    else:
        raise ValueError(f"method={method!r} has no SlowFast mapping")
    if dream:
        out["count_rule"] = "all"
    return out, notes


_PAPER_OVERRIDES = {
    "fast-dllm": _fast_dllm_overrides,
    "fast-dllm-pp": _fast_dllm_pp_overrides,
    "slowfast": _slowfast_overrides,
}


def _count_rule(row: PublishedRow) -> str:
    if row["paper"] == "slowfast" and row["model"].startswith("Dream"):
        return "all"
    if row["task"] == "humaneval" or row["model"].startswith("Dream"):
        return "nonstop"
    return "cut"


def cell_for_row(spec: TableSpec, row: PublishedRow, conf_dir: Path = CONF_DIR) -> Cell:
    """The cell a published row occupies and the overrides of the run that reproduces it."""
    key = {f: row[f] for f in (*spec.row_fields, *spec.col_fields)}
    rkey = tuple(key[f] for f in spec.row_fields)
    ckey = tuple(key[f] for f in spec.col_fields)
    model = MODEL_OPTIONS.get(row["model"])
    if model is None:
        return Cell(rkey, ckey, row, {}, f"{row['model']} is not a diffusion model this harness runs")
    task = TASK_OPTIONS.get(row["task"], row["task"])
    overrides: dict[str, Any] = {"model": model, "task": task}
    notes: list[str] = []
    shots = row.integer("num_fewshot")
    if shots is None and row["paper"] == "slowfast":
        shots = SLOWFAST_SHOTS[row["task"]]
        notes.append(f"{shots}-shot from the SlowFast scripts (paper states none)")
    if shots is not None:
        overrides["task.num_fewshot"] = shots
    paper_overrides, paper_notes = _PAPER_OVERRIDES[row["paper"]](row)
    overrides.update(paper_overrides)
    overrides.setdefault("count_rule", _count_rule(row))
    notes.extend(paper_notes)
    unavailable = None
    if not task_available(task, conf_dir):
        unavailable = f"no task '{task}' in this harness (conf/task/{task}.yaml missing)"
    return Cell(rkey, ckey, row, overrides, unavailable, tuple(notes))


def tiny_cells(conf_dir: Path = CONF_DIR) -> list[Cell]:
    """The embedded tiny model's own grid: selectors x caches, all other settings in the `tiny` preset."""
    preset = OmegaConf.load(conf_dir / "experiment" / "tiny.yaml")
    cells = []
    for selector in TINY_SELECTORS:
        for cache in TINY_CACHES:
            overrides: dict[str, Any] = {"selector": selector, "cache": cache}
            if selector == "topk":
                overrides["steps"] = int(preset.gen_length)  # one token per step
            cells.append(Cell((selector,), (cache,), None, overrides))
    return cells


def table_cells(spec: TableSpec, published: list[PublishedRow] | None = None) -> list[Cell]:
    """Every cell of a table in published order (or grid order for the tiny table)."""
    if spec.paper is None:
        return tiny_cells()
    rows = load_published() if published is None else published
    selected = [r for r in rows if r["paper"] == spec.paper and r["table"] == spec.table]
    if not selected:
        raise ValueError(f"table {spec.name}: no published rows for {spec.paper} {spec.table}")
    return [cell_for_row(spec, r) for r in selected]


def results_name(spec: TableSpec, conf_dir: Path = CONF_DIR) -> str:
    """The `name` its preset gives the runs: they land in results/<name>/runs.csv."""
    return str(OmegaConf.load(conf_dir / "experiment" / f"{spec.preset}.yaml").get("name", spec.preset))


def get_table(name: str) -> TableSpec:
    """Look a table up by name; the error lists every known table."""
    if name not in TABLES:
        raise ValueError(f"table={name!r} is unknown; choose one of {', '.join(TABLES)}")
    return TABLES[name]
