"""Decoding policies, one file each; importing this package registers every module in it (``base.POLICIES``).

Adding a policy: a file here with a ``@register``-ed frozen dataclass subclassing ``PolicyBase`` (its state, its
``init_state``, ``block``, ``decide``, ``advance``, and the hooks it changes), and ``conf/policy/<name>.yaml``
extending its defaults (``- /defaults/policy/<name>@_here_``; the dataclass holds them, docs/runner.md).
docs/architecture.md describes the protocol.
"""

from __future__ import annotations

from dllm_bench.decoding.params import import_submodules
from dllm_bench.decoding.policies.base import (
    POLICIES,
    Policy,
    PolicyBase,
    build_policy,
    policy_defaults,
    policy_parameters,
    register,
    span_mask,
)
from dllm_bench.decoding.rules.base import StepContext

import_submodules(__name__, __path__)

from dllm_bench.decoding.policies.blocks import BlockPolicy, BlockState  # noqa: E402
from dllm_bench.decoding.policies.dmax import SOFT_PRESETS, SoftPolicy, SoftState  # noqa: E402
from dllm_bench.decoding.policies.dpad import DPadPolicy, DPadState  # noqa: E402
from dllm_bench.decoding.policies.dream import DREAM_ALGORITHMS, DreamPolicy, DreamState  # noqa: E402
from dllm_bench.decoding.policies.dream_threshold import DreamThresholdPolicy, DreamThresholdState  # noqa: E402
from dllm_bench.decoding.policies.llada21 import EDIT_PRESETS, EditPolicy, EditState  # noqa: E402
from dllm_bench.decoding.policies.slowfast import SLOWFAST_PRESETS, SlowFastPolicy, SlowFastState  # noqa: E402
from dllm_bench.decoding.policies.wino import WinoPolicy, WinoState  # noqa: E402

__all__ = ["DREAM_ALGORITHMS", "EDIT_PRESETS", "POLICIES", "SLOWFAST_PRESETS", "BlockPolicy", "BlockState", "DPadPolicy", "DPadState",
           "DreamPolicy", "DreamState", "DreamThresholdPolicy", "DreamThresholdState", "EditPolicy", "EditState", "Policy", "PolicyBase",
           "SOFT_PRESETS", "SlowFastPolicy", "SlowFastState", "SoftPolicy", "SoftState", "StepContext", "WinoPolicy", "WinoState", "build_policy",
           "policy_defaults", "policy_parameters", "register", "span_mask"]
