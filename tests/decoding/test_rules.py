"""Rules as one file each: the registry, strict parameters, no host reads in a commit, and SlowFast's fast phase taking any adaptive rule that ranks by probability."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dllm_bench.decoding import build_cache, build_policy, check_combination
from dllm_bench.decoding.rules import RULES, StepContext, build_rule

ROOT = Path(__file__).resolve().parents[2]
RULE_YAMLS = ROOT / "conf" / "rule"


# ---------------------------------------------------------------- registry, YAML, strict parameters


def test_every_rule_yaml_is_a_registered_rule_and_back():
    yaml_names = {p.stem for p in RULE_YAMLS.glob("*.yaml")} - {"none"}
    assert yaml_names == set(RULES)


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_declares_the_protocol(name):
    rule = build_rule(name)
    assert rule.name == name
    assert isinstance(rule.adaptive, bool)
    assert rule.measure in ("top1_prob", "margin", "neg_entropy", "random")
    assert callable(rule.commit)
    assert build_rule is build_rule


@pytest.mark.parametrize(("name", "params", "match"), [
    ("frechet", {"dleta": 0.1}, r"^rule 'frechet': unknown parameter dleta=0.1; allowed: delta$"),
    ("frechet", {"delta": "0.1"}, r"^rule 'frechet': parameter delta='0.1' must be float$"),
    ("threshold", {"threshold": True}, r"parameter threshold=True must be float"),
    ("factor", {"compat": 1}, r"parameter compat=1 must be bool"),
    ("topk", {"remasking": None}, r"parameter remasking=None must be str"),
])
def test_bad_parameters_are_refused_in_one_line(name, params, match):
    with pytest.raises(ValueError, match=match) as err:
        build_rule(name, **params)
    assert "\n" not in str(err.value)


def test_integer_for_a_float_parameter_is_taken_as_float():
    assert build_rule("factor", f=1) == build_rule("factor", f=1.0)
    assert isinstance(build_rule("factor", f=1).f, float)


# ---------------------------------------------------------------- no host reads inside a commit


def _ctx(conf: torch.Tensor, cand: torch.Tensor) -> StepContext:
    pred = torch.zeros(conf.shape, dtype=torch.long, device=conf.device)
    return StepContext(conf, cand, pred, cand.clone(), pred.clone(), quota=torch.ones(conf.shape[0], dtype=torch.long,
                                                                                        device=conf.device))


@pytest.mark.parametrize("name", sorted(RULES))
def test_commit_runs_on_the_meta_device(name):
    """A meta tensor has no values: any .item(), bool(), nonzero or boolean-mask indexing in a rule fails here."""
    conf = torch.empty(3, 16, dtype=torch.float64, device="meta")
    cand = torch.empty(3, 16, dtype=torch.bool, device="meta")
    ctx = _ctx(conf, cand)
    rule = build_rule(name)
    if rule.plans:  # it commits in the order its state holds (its plan)
        ctx.state = rule.init_state(3, 16, 8, conf.device)
    mask = rule.commit(ctx)
    assert mask.shape == (3, 16) and mask.dtype == torch.bool


# ---------------------------------------------------------------- SlowFast's fast phase


def test_slowfast_takes_any_adaptive_rule_ranking_by_probability():
    taken = [name for name, cls in RULES.items() if cls.adaptive and build_rule(name).measure == "top1_prob"
             and name not in ("credit", "klass")]  # both keep per-block state of policy 'blocks'
    for name in taken:
        check_combination(build_policy("slowfast"), build_rule(name), build_cache("none"), gen_length=24,
                          block_length=8)
    assert {"threshold", "factor", "frechet", "oracle"} <= set(taken)


def test_slowfast_refuses_a_rule_that_is_not_adaptive():
    with pytest.raises(ValueError, match="takes an adaptive rule for its fast phase"):
        check_combination(build_policy("slowfast"), build_rule("topk"), build_cache("none"), gen_length=24,
                          block_length=8)
