"""``forward_positions`` on the real network (its LM-head window included): the query positions computed for a
row, by formula per cache mode, and the same for a document at batch 1, batch 8 and under 2-process sharding."""

from __future__ import annotations

import pytest

from dllm_bench.decoding import build_cache, build_policy, build_rule
from dllm_bench.models import load_model
from dllm_bench.runner.sharding import DistContext, shard

from .conftest import left_pad, prompts_for
from .spec_kwargs import spec_generate

G, BL, STEPS = 16, 8, 8
LENGTHS = (9, 5, 12, 3, 7, 10, 6, 4)  # eight documents of different prompt lengths (left padding in a batch)


@pytest.fixture(scope="module", params=["llada", "dream"])
def network(request, tiny_llada_dir, tiny_dream_dir):
    model = load_model(tiny_llada_dir if request.param == "llada" else tiny_dream_dir, device="cpu")
    assert type(model).accepts_logits_range  # the real network, LM-head window and all
    return model


def decode(model, prompts, policy, rule, cache, block_length=BL):
    ids, mask = left_pad(prompts, model.config.pad_token_id)
    return spec_generate(model, ids, mask, gen_length=G, block_length=block_length, policy=policy, rule=rule,
                         cache=cache)


CASES = {
    "none": (("blocks", {}), ("threshold", {"threshold": 0.05}), ("none", {})),
    "prefix": (("blocks", {}), ("threshold", {"threshold": 0.05}), ("prefix", {})),
    "dual": (("blocks", {}), ("threshold", {"threshold": 0.05}), ("dual", {})),
    "dllm": (("blocks", {}), ("threshold", {"threshold": 0.05}),
             ("dllm", {"prompt_interval": 3, "response_interval": 2, "verify_ratio": 0.25})),
    "slowfast_cut": (("slowfast", {"preset": "code", "truncate_fast": True, "threshold": 0.05}), None, ("none", {})),
    "slowfast_cut_dllm": (("slowfast", {"preset": "code", "truncate_fast": True, "threshold": 0.05}), None,
                          ("dllm", {"prompt_interval": 3, "response_interval": 2, "verify_ratio": 0.25})),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_positions_of_a_document_do_not_depend_on_batch_or_sharding(network, case):
    pol, sel, cache = CASES[case]
    block_length = G if pol[0] == "slowfast" else BL

    def run(prompts):
        return decode(network, prompts, build_policy(pol[0], **pol[1]),
                      build_rule(sel[0], **sel[1]) if sel else None, build_cache(cache[0], **cache[1]),
                      block_length=block_length).records

    docs = prompts_for(network, LENGTHS)
    alone = [run([d])[0].forward_positions for d in docs]
    batch8 = [r.forward_positions for r in run(docs)]
    sharded = {}
    for rank in range(2):
        ctx = DistContext(rank=rank, world_size=2)
        mine = shard(list(range(len(docs))), ctx)
        for lo in range(0, len(mine), 3):  # batches of 3 on each rank
            group = mine[lo:lo + 3]
            for i, rec in zip(group, run([docs[i] for i in group])):
                sharded[i] = rec.forward_positions
    assert batch8 == alone
    assert [sharded[i] for i in range(len(docs))] == alone


def test_positions_by_formula_for_each_cache(network):
    """Fixed steps (8 over 2 blocks): no cache = real prompt + answer per forward; prefix = a refresh then
    [block_start, end) (+1 before it for Dream's shift); dual = a refresh then the block (+1); dLLM-Cache = the
    refreshed part(s) plus the verified tokens."""
    shift = int(network.config.shift_logits)
    policy, rule = build_policy("blocks", steps=STEPS), build_rule("topk")
    per_block = STEPS // (G // BL)
    for prompt in prompts_for(network, (9, 5)):
        P = len(prompt)
        full = P + G
        got = {name: decode(network, [prompt], policy, rule, build_cache(name)).records[0].forward_positions
               for name in ("none", "prefix", "dual")}
        assert got["none"] == STEPS * full
        assert got["prefix"] == sum(full + (per_block - 1) * (G - b * BL + shift) for b in range(G // BL))
        assert got["dual"] == (G // BL) * (full + (per_block - 1) * (BL + shift))
        cfg = build_cache("dllm", prompt_interval=3, response_interval=2, verify_ratio=0.25)
        want = 0
        for step in range(1, STEPS + 1):
            rp, rr, rho = cfg.plan(step)
            want += (P if rp else 0) + (G if rr else int(G * rho))
        assert decode(network, [prompt], policy, rule, cfg).records[0].forward_positions == want
