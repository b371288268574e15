"""Compose conf/ as `dllm-bench <overrides>` does, for callers outside the Hydra app (the lm-eval adapter).

A key the config lacks makes Hydra suggest `+key=value`; both here and in the app it is added instead, so the
composed config reaches `validate.check_keys`, whose one line names the key, the value and the allowed keys.
"""

from __future__ import annotations

import re

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig

from dllm_bench.runner.config import CONF_DIR, register_resolvers
from dllm_bench.runner.errors import missing_option_line
from dllm_bench.runner.group_defaults import store_group_defaults
from dllm_bench.runner.validate import ConfigError

UNKNOWN_OVERRIDE = re.compile(r"Could not override '([^']+)'")


def append_unknown_key(overrides: list[str], err: BaseException) -> list[str] | None:
    """`overrides` with the one Hydra could not apply (a key the config lacks: a typo) as `+key=value`; None
    when the error is another one (or names a key of Hydra's own config)."""
    match = UNKNOWN_OVERRIDE.search(str(err))
    if match is None or match.group(1).startswith("hydra."):
        return None
    key = match.group(1)
    for i, arg in enumerate(overrides):
        if not arg.startswith(("-", "+", "~")) and arg.partition("=")[0] == key:
            return [*overrides[:i], "+" + arg, *overrides[i + 1:]]
    return None


def compose_run_config(overrides: list[str]) -> DictConfig:
    """The run config of `overrides` (unchecked: pass it to `validate`); a group option that does not exist is
    a ConfigError listing the options."""
    register_resolvers()
    store_group_defaults()  # a rule, cache or policy registered since Hydra first imported them gets its node
    overrides = list(overrides)
    for _ in range(len(overrides) + 1):
        try:
            with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
                return compose("config", overrides=overrides)
        except MissingConfigException as err:
            raise ConfigError(missing_option_line(err) or str(err)) from None
        except ConfigCompositionException as err:
            retry = append_unknown_key(overrides, err)
            if retry is None:
                raise ConfigError(" ".join(str(err).split())) from None
            overrides = retry
    raise AssertionError("unreachable: each retry adds one '+'")
