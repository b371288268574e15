"""Policies are one-file plugins: every registered policy follows the protocol, and a policy defined and
registered anywhere (here: in this file) is built, checked, exported and decoded with no other edit; traces keep
every step a row is active."""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass
from typing import Any, ClassVar

import pytest
import torch

import dllm_bench.decoding as decoding
from dllm_bench.decoding import build_cache, build_policy, build_rule, check_combination
from dllm_bench.decoding.config import POLICIES, builder_parameters
from dllm_bench.decoding.policies import Policy, PolicyBase, register

from .scripted import ScriptedNetwork
from .spec_kwargs import spec_generate

G = 6


@dataclass
class LeftToRightState:
    gen_length: int
    step: torch.Tensor  # [B] long: steps taken


@dataclass(frozen=True)
class LeftToRight(PolicyBase):
    """Commits the leftmost masked position each step; runs ``extra`` more steps once the answer is full."""

    extra: int = 0
    name: ClassVar[str] = "left_to_right_test"

    def check(self) -> None:
        if self.extra < 0:
            raise ValueError(f"left_to_right_test extra must be >= 0, got {self.extra}")

    def refuse_rule(self, rule: Any) -> str | None:
        return None if rule is None else f"policy {self.name!r} has its own rule: rule must be none, got {rule.name!r}"

    def init_state(self, batch: int, gen_length: int, block_length: int, device: torch.device) -> LeftToRightState:
        return LeftToRightState(gen_length, torch.zeros(batch, dtype=torch.long, device=device))

    def block(self, state: LeftToRightState) -> tuple[torch.Tensor, torch.Tensor]:
        lo = torch.zeros_like(state.step)
        return lo, lo + state.gen_length

    def decide(self, state: LeftToRightState, ctx, rule) -> tuple[torch.Tensor, torch.Tensor]:
        j = torch.arange(ctx.candidates.shape[1], device=ctx.candidates.device).unsqueeze(0)
        first = torch.where(ctx.candidates, j, ctx.candidates.shape[1]).min(dim=1).values
        return (j == first.unsqueeze(1)) & ctx.candidates, ctx.prediction

    def advance(self, state: LeftToRightState, masked: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        state.step += active.long()
        return state.step >= state.gen_length + self.extra


@pytest.fixture
def left_to_right():
    register(LeftToRight)
    yield LeftToRight
    del POLICIES[LeftToRight.name]


def _required(cls) -> dict[str, int]:
    return {f.name: 4 for f in dataclasses.fields(cls) if f.init and f.default is MISSING}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_registered_policy_follows_the_protocol(name):
    cls = POLICIES[name]
    assert issubclass(cls, PolicyBase) and cls.name == name
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    policy = build_policy(name, **_required(cls))
    assert isinstance(policy, Policy)
    assert builder_parameters("policy", name) == tuple(f.name for f in dataclasses.fields(cls) if f.init)
    assert getattr(decoding, cls.__name__) is cls and cls.__name__ in decoding.__all__


def test_the_package_exports_every_registered_rule_cache_and_policy():
    registered = {cls.__name__ for reg in (decoding.RULES, decoding.CACHES, decoding.POLICIES) for cls in reg.values()}
    assert registered <= set(decoding.__all__)
    assert {"build_rule", "build_policy", "build_cache", "generate"} <= set(decoding.__all__)


def test_a_policy_registered_in_its_own_file_builds_checks_and_decodes(left_to_right):
    assert "left_to_right_test" in POLICIES and builder_parameters("policy", "left_to_right_test") == ("extra",)
    with pytest.raises(ValueError, match=r"^policy 'left_to_right_test': unknown parameter steps=3; allowed: extra$"):
        build_policy("left_to_right_test", steps=3)
    with pytest.raises(ValueError, match=r"^left_to_right_test extra must be >= 0, got -1$"):
        build_policy("left_to_right_test", extra=-1)
    policy = build_policy("left_to_right_test")
    with pytest.raises(ValueError, match=r"^policy 'left_to_right_test' has its own rule: rule must be none, got "
                                         r"'threshold'$"):
        check_combination(policy, build_rule("threshold"), build_cache("none"), gen_length=G, block_length=G)
    net = ScriptedNetwork(3, [[0.9] * G])
    out = spec_generate(net, torch.tensor([[1, 2, 3]]), gen_length=G, block_length=G, policy=policy)
    assert out.tokens[0].tolist() == [1 + j % 10 for j in range(G)]
    assert out.records[0].nfe == G and len(net.calls) == G


def test_traces_keep_every_step_a_row_is_active(left_to_right):
    """Two steps after the answer is full: no candidates, nothing committed, still one entry each."""
    net = ScriptedNetwork(3, [[0.9] * G])
    out = spec_generate(net, torch.tensor([[1, 2, 3]]), gen_length=G, block_length=G,
                        policy=build_policy("left_to_right_test", extra=2), trace=True)
    trace = out.records[0].trace
    assert out.records[0].nfe == G + 2 and [t.step for t in trace] == list(range(G + 2))
    assert [t.n_committed for t in trace] == [1] * G + [0, 0]
    assert [len(t.sorted_confidences) for t in trace] == [G - i for i in range(G)] + [0, 0]


def test_policy_base_hooks_default_to_doing_nothing():
    class Runner:
        def run(self, x, rows, read, view):
            return ["ran", x, rows, read, view]

    base = LeftToRight()
    assert base.forward(None, Runner(), 1, 2, 3, 4) == ["ran", 1, 2, 3, 4]
    answer = torch.tensor([[5, 6]])
    assert base.revise(None, None, answer, torch.tensor([True]), 9) is None and answer.tolist() == [[5, 6]]
    read = torch.tensor([[True, False]])
    assert base.read(None, read, read, torch.tensor([True])) is read
    assert base.soft_inputs(None, Runner(), answer, torch.tensor([True])) is None
    assert base.canvas_limit(None) is None and base.dropout(4, 0, 1, torch.device("cpu")) is None
    assert base.ends_rows_early() is None and base.measure is None
    base.check_measure("margin")  # no measure of its own: any given one is the rule's business
    base.check_model(None)
    assert base.place_prompt(None, torch.ones(1, 3), None) is None
    assert base.refuse_cache(build_cache("dual")) is None and base.refuse_cfg(2.0) is None
