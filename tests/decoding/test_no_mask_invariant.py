"""No returned answer holds the mask id: every policy x rule x cache x compat combination the builders accept,
and ``generate`` raising (never returning) when a schedule would leave one."""

from __future__ import annotations

import itertools

import pytest
import torch

import dllm_bench.decoding.spec as spec_module
from dllm_bench.decoding import build_cache, build_policy, build_rule, check_combination
from dllm_bench.decoding.policies import BlockPolicy

from .conftest import left_pad, prompts_for
from .spec_kwargs import spec_generate

G = 16
POLICIES = [
    *[(("blocks", {"steps": s}), ("topk", {})) for s in (2, 8)],
    *[(("blocks", {}), sel) for sel in (("threshold", {"threshold": 0.9}), ("factor", {"f": 1.0}),
                                        ("factor", {"f": 1.0, "compat": True}), ("frechet", {"delta": 0.25}),
                                        ("oracle", {}))],
    *[(("dream", {"steps": s, "alg": alg}), None) for alg in ("origin", "maskgit_plus", "topk_margin", "entropy")
      for s in (1, 4)],
    *[(("slowfast", {"preset": p, "truncate_fast": t}), None) for p in ("code", "dream") for t in (False, True)],
]
CACHES = [("none", {}), *[(c, {"compat_first_token": f}) for c in ("prefix", "dual") for f in (False, True)],
          ("prefix", {"refresh_every": 1, "compat_first_token": True}),
          *[("dllm", {"prompt_interval": 3, "response_interval": 2, "verify_ratio": 0.25, "layer0_always": z})
            for z in (True, False)]]


def accepted(policy, rule, cache):
    """The block length the combination runs with (8, else the whole answer), or None when it is refused."""
    for block_length in (8, G):
        try:
            check_combination(policy, rule, cache, gen_length=G, block_length=block_length)
            return block_length
        except ValueError:
            continue
    return None


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["llada", "dream"])
def test_no_answer_holds_a_mask_id_for_any_accepted_combination(llada, dream, flavour):
    model = llada if flavour == "llada" else dream
    ids, mask = left_pad(prompts_for(model, (9, 5)), model.config.pad_token_id)
    ran = 0
    for (pol, sel), (cache_name, cache_params) in itertools.product(POLICIES, CACHES):
        policy = build_policy(pol[0], **pol[1])
        rule = build_rule(sel[0], **sel[1]) if sel else None
        cache = build_cache(cache_name, **cache_params)
        block_length = accepted(policy, rule, cache)
        if block_length is None:
            continue
        reference = torch.randint(0, 90, (ids.shape[0], G)) if sel and sel[0] == "oracle" else None
        out = spec_generate(model, ids, mask, gen_length=G, block_length=block_length, policy=policy, rule=rule,
                            cache=cache, reference=reference)  # generate itself raises on a left-over mask id
        assert not (out.tokens == model.config.mask_token_id).any(), (pol, sel, cache_name, cache_params)
        ran += 1
    assert ran >= 80


def test_fixed_steps_with_forced_first_token_flush_the_block_remainder(dream):
    """Fixed steps (4 per block of 8: 2 each) + compat_first_token: the refresh commits 1, the last step the rest."""
    ids, mask = left_pad(prompts_for(dream)[:1], dream.config.pad_token_id)
    out = spec_generate(dream, ids, mask, gen_length=G, block_length=8, policy=build_policy("blocks", steps=8),
                        rule=build_rule("topk"), cache=build_cache("dual", compat_first_token=True), trace=True)
    assert [t.n_committed for t in out.records[0].trace] == [1, 2, 2, 3] * 2
    assert out.records[0].nfe == 8


def test_generate_raises_instead_of_returning_a_mask_id(llada, monkeypatch):
    class Quitter(BlockPolicy):
        """Declares every row finished after the first step although masks remain."""

        def advance(self, state, masked, active):
            super().advance(state, masked, active)
            return torch.ones_like(active)

    monkeypatch.setattr(spec_module, "check_combination", lambda *a, **k: None)
    ids, mask = left_pad(prompts_for(llada)[:2], llada.config.pad_token_id)
    with pytest.raises(RuntimeError, match=r"left \d+ mask ids in rows \[0, 1\]"):
        spec_generate(llada, ids, mask, gen_length=G, block_length=8, policy=Quitter(steps=8),
                      rule=build_rule("topk"))
