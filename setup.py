"""Build hooks (the rest of the metadata is pyproject.toml's): a built package carries the Hydra configuration
(conf/ -> dllm_bench/conf) and lm-eval's registration line (``dllm_bench_lm_eval.pth`` at the top of
site-packages), so ``pip install`` of a wheel or a ``git+`` URL gives a working ``dllm-bench`` and
``lm_eval --model dllm_bench``. An editable install reads conf/ from the checkout and gets the .pth from
``make setup`` (``python -m dllm_bench.lm_eval_plugin --install``)."""

import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _plugin():
    """dllm_bench/lm_eval_plugin.py alone (standard library only: the build environment has no torch)."""
    spec = importlib.util.spec_from_file_location("_dllm_bench_lm_eval_plugin", ROOT / "dllm_bench" / "lm_eval_plugin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPackage(build_py):
    """build_py plus conf/ inside the package and the lm-eval .pth beside it."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        build = Path(self.build_lib)
        shutil.copytree(ROOT / "conf", build / "dllm_bench" / "conf", dirs_exist_ok=True)
        plugin = _plugin()
        (build / plugin.PTH_NAME).write_text(plugin.PTH_LINE)


setup(cmdclass={"build_py": BuildPackage})
