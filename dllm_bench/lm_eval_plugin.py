"""Make ``lm_eval --model dllm_bench`` work: lm-eval 0.4 reads no plugin entry points, so a one-line ``.pth``
file registers our model with lm-eval's registry lazily, the moment lm-eval builds that registry.

Nothing is imported until lm-eval itself is (the hook is a meta-path finder watching for
``lm_eval.api.registry``), so other programs in the environment pay nothing. ``make setup`` installs it;
with a plain pip install run ``python -m dllm_bench.lm_eval_plugin --install``.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import sys
import sysconfig
from pathlib import Path

REGISTRY_MODULE = "lm_eval.api.registry"
MODEL_TARGET = "dllm_bench.lm_eval_adapter:DllmBenchLM"
PTH_NAME = "dllm_bench_lm_eval.pth"
PTH_LINE = 'import sys; exec("try:\\n import dllm_bench.lm_eval_plugin as p; p.install()\\nexcept ImportError:\\n pass")\n'


class _RegistryWatcher(importlib.abc.MetaPathFinder):
    """Lets lm-eval load its registry normally, then adds ``dllm_bench`` as a lazy (string) registration."""

    def find_spec(self, name, path, target=None):
        if name != REGISTRY_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            module.model_registry.register("dllm_bench", target=MODEL_TARGET)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Register lazily if lm-eval is not imported yet; at once if it is."""
    registry = sys.modules.get(REGISTRY_MODULE)
    if registry is not None:
        registry.model_registry.register("dllm_bench", target=MODEL_TARGET)
    elif not any(isinstance(f, _RegistryWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegistryWatcher())


def install_pth(site_packages: str | None = None) -> Path:
    """Write the ``.pth`` hook into this interpreter's site-packages."""
    target = Path(site_packages or sysconfig.get_paths()["purelib"]) / PTH_NAME
    target.write_text(PTH_LINE)
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description="install the hook that registers dllm_bench with lm-eval")
    ap.add_argument("--install", action="store_true", help=f"write {PTH_NAME} into site-packages")
    args = ap.parse_args()
    if not args.install:
        ap.error("nothing to do: pass --install")
    print(f"wrote {install_pth()}")


if __name__ == "__main__":
    main()
