"""dllm-bench: a reproduction harness for fast inference of diffusion language models.

The Python API (``dllm_bench.api``): ``evaluate`` runs an evaluation from the command line's keys and returns its
rows; ``encode_prompts`` and ``load_model`` give ``dllm_bench.decoding.generate`` its inputs; ``read_results``,
``tables``, ``plot_pareto``, ``pareto_points`` and ``confidence_profiles`` report on recorded runs.
"""

__version__ = "0.1.0"
__all__ = [
    "confidence_profiles", "encode_prompts", "evaluate", "load_model", "pareto_points", "plot_pareto", "read_results",
    "results_dir", "tables",
]


def __getattr__(name: str):
    """The API's names, imported on first use (``import dllm_bench`` stays light: lm-eval's hook imports it)."""
    if name in __all__ and name != "load_model":
        from dllm_bench import api

        return getattr(api, name)
    if name == "load_model":
        from dllm_bench.models import load_model

        return load_model
    raise AttributeError(f"module 'dllm_bench' has no attribute {name!r}")
