"""dllm-bench: a reproduction harness for fast inference of diffusion language models."""

__version__ = "0.1.0"
