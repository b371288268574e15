"""Config keys renamed so that one concept has one name and one name one meaning (docs/runner.md, "Renamed keys").

A probability that a candidate's confidence must reach is `threshold` everywhere (`<what>_threshold` when a group
has several); a quantity in nats or a cosine is named after what it is; the model family whose published loop a
method follows is `flavour`, as in `model.flavour`. An old spelling is refused with one line naming its new key,
and runs.csv rows written under an old spelling are read under the new one
(`report.runs.rename_columns`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Renamed:
    """`<group>.<old>` of option `<option>` is now `<group>.<new>`; `meaning` says what the value is."""

    group: str
    option: str
    old: str
    new: str
    meaning: str


RENAMED_KEYS = (
    Renamed("rule", "threshold", "tau", "threshold", "a confidence (probability) a candidate must reach"),
    Renamed("rule", "local_leap", "tau", "threshold", "a confidence (probability) an anchor must reach"),
    Renamed("rule", "local_leap", "relaxed_tau", "relaxed_threshold",
            "a confidence (probability) a candidate near an anchor must reach"),
    Renamed("rule", "klass", "conf_threshold", "threshold", "a confidence (probability) a candidate must exceed"),
    Renamed("rule", "klass", "variant", "flavour", "the model family whose published loop runs: llada | dream"),
    Renamed("rule", "entropy_threshold", "threshold", "max_entropy", "an entropy in nats a candidate may have"),
    Renamed("rule", "eb_sampler", "gamma", "entropy_budget", "an error bound in nats (sum H - max H)"),
    Renamed("policy", "dream_threshold", "tau", "threshold", "a confidence (probability) an extra slot must reach"),
    Renamed("policy", "slowfast", "tau_high", "threshold", "a confidence (probability) a commit must reach"),
    Renamed("policy", "slowfast", "explore_tau", "explore_threshold",
            "a confidence (probability) an exploration commit must reach"),
    Renamed("policy", "slowfast", "tau_min", "converge_threshold",
            "a confidence (probability) that marks a span as converged"),
    Renamed("policy", "slowfast", "variant", "flavour", "the model family whose published loop runs: llada | dream"),
    Renamed("policy", "dpad", "sigma", "max_sd", "standard deviations of the Gaussian the suffix window spans"),
    Renamed("cache", "elastic", "gamma", "min_cosine", "an attention cosine below which a layer refreshes"),
)


def renamed_key(group: str, option: str, key: str) -> Renamed | None:
    """The rename of `<group>.<key>` for option `option`, None when the key was never renamed."""
    return next((r for r in RENAMED_KEYS if (r.group, r.option, r.old) == (group, option, key)), None)


def current_names(group: str, option: str, params: dict[str, Any]) -> dict[str, Any]:
    """An option's parameters as recorded under old spellings (a fixture of published code), under the new ones."""
    return {(renamed.new if (renamed := renamed_key(group, option, k)) else k): v for k, v in params.items()}


def as_first_spelled(data: dict[str, Any]) -> dict[str, Any]:
    """A resolved config with each renamed key under its first spelling: what a run id digests, so that a config
    keeps the id (and its results folder) it had before the rename."""
    out = dict(data)
    for group in {r.group for r in RENAMED_KEYS}:
        node = out.get(group)
        if not isinstance(node, dict):
            continue
        olds = {r.new: r.old for r in RENAMED_KEYS if (r.group, r.option) == (group, node.get("name"))}
        if olds:
            out[group] = {olds.get(k, k): v for k, v in node.items()}
    return out


def renamed_flat(setting: dict[str, str]) -> dict[str, str]:
    """A flattened config recorded under old spellings (a run.json of an earlier run), under the new ones."""
    out = dict(setting)
    for r in RENAMED_KEYS:
        old = f"{r.group}.{r.old}"
        if out.get(f"{r.group}.name") == r.option and old in out:
            out[f"{r.group}.{r.new}"] = out.pop(old)
    return out


def refusal(renamed: Renamed, value: object) -> str:
    """One line: `rule.tau was renamed rule.threshold (...): rule.threshold=0.8`."""
    return (f"{renamed.group}.{renamed.old} was renamed {renamed.group}.{renamed.new} ({renamed.group} "
            f"{renamed.option!r}: {renamed.meaning}): use {renamed.group}.{renamed.new}={value!r}")

