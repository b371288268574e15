"""`lm_eval --model dllm_bench` resolves in a fresh interpreter (the .pth hook `make setup` installs)."""

from __future__ import annotations

import subprocess
import sys

from dllm_bench import lm_eval_plugin


def test_fresh_interpreter_resolves_dllm_bench_model() -> None:
    code = (
        "import sys\n"
        "assert 'dllm_bench.lm_eval_adapter' not in sys.modules  # nothing imported before lm-eval asks\n"
        "from lm_eval.api.registry import get_model\n"
        "print(get_model('dllm_bench').__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "DllmBenchLM"


def test_install_pth_writes_the_hook(tmp_path) -> None:
    path = lm_eval_plugin.install_pth(str(tmp_path))
    assert path.name == lm_eval_plugin.PTH_NAME and path.read_text() == lm_eval_plugin.PTH_LINE
