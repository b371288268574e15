"""Errors as one line for the command line: `<prog>: error: <message>`, the traceback only when asked for."""

from __future__ import annotations

import os
import re
import sys

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

# Exceptions whose message already names the file, line, key or tensor at fault: shown as is.
USER_ERRORS = (OSError, ValueError, KeyError, HydraException, OmegaConfBaseException)
TRACEBACK_ENV = "HYDRA_FULL_ERROR"
# The user's choice, fixed by `dllm-bench`'s entry point before it sets HYDRA_FULL_ERROR for Hydra itself
# (inherited by launcher worker processes).
CHOICE_ENV = "DLLM_BENCH_TRACEBACK"


class ConfigError(ValueError):
    """A run config value is not allowed; the message names key, value and what is allowed."""


def traceback_requested() -> bool:
    """Whether the user asked for full tracebacks (`HYDRA_FULL_ERROR=1`, Hydra's own switch)."""
    choice = os.environ.get(CHOICE_ENV)
    if choice is not None:
        return choice == "1"
    return os.environ.get(TRACEBACK_ENV, "") not in ("", "0")


def one_line(err: BaseException) -> str:
    """The exception's message on one line; other exceptions (likely bugs) carry their type and the switch."""
    text = " ".join(str(err).split()) if not isinstance(err, KeyError) else f"missing key {err}"
    if isinstance(err, HydraException):
        text = text.split(" Config search path:")[0]  # Hydra's search path list says nothing about the mistake
    if isinstance(err, USER_ERRORS):
        return text or type(err).__name__
    return f"{type(err).__name__}: {text} ({TRACEBACK_ENV}=1 prints the traceback)"


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: how many sample rows the run folder keeps (a rerun resumes after them)."""

    def __init__(self, kept: int) -> None:
        super().__init__(kept)
        self.kept = kept


def interrupted_line(prog: str, err: KeyboardInterrupt) -> str:
    """The one line printed on Ctrl-C."""
    kept = getattr(err, "kept", 0)
    return f"{prog}: interrupted; {kept} rows kept, rerun to resume"


def cause_of_kind(err: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of `kind` in err's chain of causes (OmegaConf and Hydra wrap a resolver's error)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


MISSING_OPTION = re.compile(r"Could not find '([\w/@.-]+)/([^']*)'.*?Available options in '[^']+':(.*)$", re.S)


def missing_option_line(err: BaseException) -> str | None:
    """Hydra's "Could not find 'rule/frechett' ... Available options" as `rule='frechett' is not allowed: ...`."""
    match = MISSING_OPTION.search(str(err))
    if match is None:
        return None
    group, option, available = match.groups()
    available = available.split("Config search path:")[0]
    choices = ", ".join(available.split())
    return f"{group.replace('/', '.')}={option!r} is not allowed: choose one of {choices} (files in conf/{group}/)"


def report(prog: str, err: BaseException, kind: str = "error") -> None:
    """Print `<prog>: <kind>: <message>` to stderr."""
    print(f"{prog}: {kind}: {one_line(err)}", file=sys.stderr, flush=True)
