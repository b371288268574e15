"""`dllm-bench` / `python -m dllm_bench.run`: the Hydra app that runs one config (or a --multirun sweep)."""

from __future__ import annotations

import logging
import os
import sys
import warnings

import hydra
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf, open_dict

from dllm_bench.runner.compose import append_unknown_key
from dllm_bench.runner.config import CONF_DIR, register_resolvers
from dllm_bench.runner.errors import (
    CHOICE_ENV,
    TRACEBACK_ENV,
    cause_of_kind,
    interrupted_line,
    missing_option_line,
    one_line,
    report,
    traceback_requested,
)
from dllm_bench.runner.validate import ConfigError

PROG = "dllm-bench"

log = logging.getLogger("dllm_bench.run")
# Optuna marks TPE's joint model experimental on every build of a frontier search's sampler (docs/frontier.md)
warnings.filterwarnings("ignore", message="``multivariate`` option is an experimental feature")
register_resolvers()


def resolve_per_job_device(cfg: DictConfig) -> None:
    """`model.device=per_job`: sweep job k runs on cuda:(k mod visible GPUs), so parallel jobs share GPUs out."""
    if cfg.model.get("device") != "per_job":
        return
    import torch
    from hydra.core.hydra_config import HydraConfig

    count = torch.cuda.device_count()
    if count == 0:
        raise ConfigError("model.device='per_job' is not allowed: no CUDA device is visible; use cpu or null")
    num = HydraConfig.get().job.get("num", 0) if HydraConfig.initialized() else 0
    with open_dict(cfg):
        cfg.model.device = f"cuda:{int(num or 0) % count}"


def batch1_timing(row: dict) -> str:
    """The batched mode's batch-1 figures for the summary line ('' when the run has no timing pass)."""
    if "timing_tokens_per_s" not in row:
        return ""
    return (f", batch-1 tok/s {row['timing_tokens_per_s']:.1f} on {row['timing_n_samples']} documents "
            f"(tokens agree {row['timing_agreement']:.3f})")


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def app(cfg: DictConfig) -> dict | None:
    """Validate, run or resume, and print the run's summary line."""
    from dllm_bench.runner.execute import execute

    try:
        resolve_per_job_device(cfg)
        row = execute(cfg)
    except ConfigError as err:
        report(PROG, err, "config error")
        raise SystemExit(2) from None
    except Exception as err:  # data, weights, hub, disk: the message names the culprit; HYDRA_FULL_ERROR=1 for more
        if traceback_requested():
            raise
        report(PROG, err)
        raise SystemExit(2) from None
    if row is not None:
        print(f"{row['run_id']}: accuracy {row['accuracy']:.4f} "
              f"[{row['accuracy_ci_low']:.4f}, {row['accuracy_ci_high']:.4f}] n={row['n_samples']} "
              f"NFE {row['nfe_mean']:.2f} tok/fwd {row['tokens_per_forward']:.3f} "
              f"tok/s {row['tokens_per_s']:.1f} (batch {row['batch_size']}){batch1_timing(row)} "
              f"-> {cfg.output_dir}/{cfg.name}/{row['run_id']}")
    log.debug("resolved config:\n%s", OmegaConf.to_yaml(cfg))
    return row


def run_app() -> None:
    """Hydra's app; a typed key the config lacks is retried as an addition for our own one-line refusal."""
    for _ in range(len(sys.argv)):
        try:
            app()
            return
        except ConfigCompositionException as err:
            retry = append_unknown_key(sys.argv[1:], err)
            if retry is None:
                raise
            sys.argv[1:] = retry
    app()


def main() -> None:
    """The console script: Hydra's own errors (composition, output folders) become one line too."""
    saved = {key: os.environ.get(key) for key in (CHOICE_ENV, TRACEBACK_ENV)}
    argv = list(sys.argv)
    wants_traceback = traceback_requested()
    os.environ[CHOICE_ENV] = "1" if wants_traceback else "0"
    os.environ[TRACEBACK_ENV] = "1"  # Hydra re-raises instead of printing a stripped traceback and exiting 1
    try:
        run_app()
    except BrokenPipeError:  # output piped into a reader that stopped (`dllm-bench --help | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        raise SystemExit(0) from None
    except KeyboardInterrupt as err:
        if wants_traceback:
            raise
        print(interrupted_line(PROG, err), file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except Exception as err:
        if wants_traceback:
            raise
        config_error = cause_of_kind(err, ConfigError)
        option = missing_option_line(err)
        if config_error is not None or option is not None:
            print(f"{PROG}: config error: {option or one_line(config_error)}", file=sys.stderr, flush=True)
        else:
            report(PROG, err)
        raise SystemExit(2) from None
    finally:
        sys.argv[:] = argv
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


if __name__ == "__main__":
    main()
