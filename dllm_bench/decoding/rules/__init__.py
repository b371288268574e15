"""Decoding rules, one file each; importing this package registers every module in it (``base.RULES``).

Adding a rule: a file here with a ``@register``-ed frozen dataclass (its field defaults are the one place its
defaults live), and ``conf/rule/<name>.yaml`` extending them (``- /defaults/rule/<name>@_here_``; docs/runner.md).
"""

from __future__ import annotations

from dllm_bench.decoding.params import import_submodules
from dllm_bench.decoding.rules.base import (
    RULES,
    Rule,
    RuleBase,
    StepContext,
    build_rule,
    register,
    rule_defaults,
    rule_parameters,
    rule_tokens,
)

import_submodules(__name__, __path__)

__all__ = ["RULES", "Rule", "RuleBase", "StepContext", "build_rule", "register", "rule_defaults", "rule_parameters",
           "rule_tokens"]
