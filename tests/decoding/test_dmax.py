"""DMax soft parallel decoding (policy ``dmax``): against a reference loop written here from the published
description (czg1225/DMax 82bc29e, dInfer ``decode_uniform``), batch against rows alone, the soft input's
construction, bf16, accounting and refusals."""

from __future__ import annotations

import pytest
import torch

from dllm_bench.decoding import DecodeSpec, Decoding, Sampling, build_cache, build_policy
from dllm_bench.decoding.config import build_rule
from dllm_bench.models.tiny_blocks import make_random_block_checkpoint

from .conftest import prompts_for
from .published_goldens import tiny_model
from .spec_kwargs import spec_generate


@pytest.fixture(scope="module")
def llada2(tmp_path_factory):
    from dllm_bench.models import load_model

    # init 4.0: random weights with top-1 probabilities spread over (0, 1), so that commits and settling vary
    path = make_random_block_checkpoint(tmp_path_factory.mktemp("dmax") / "llada2", "llada2", seed=0, init_std=4.0)
    return load_model(path, device="cpu")


def _soft(model, token: int, p: torch.Tensor, mask_id: int) -> torch.Tensor:
    """The published mix at one position: p (a float32 scalar tensor) of the token's embedding, the rest the mask's."""
    e, m = model.embed.weight[token], model.embed.weight[mask_id]
    mix = e * p + m * (1 - p)
    target = e.norm() * p + m.norm() * (1 - p)
    return (mix * (target / (mix.norm() + 1e-6))).to(e.dtype)


def _reference(model, prompt: list[int], G: int, L: int, threshold: float, settle: float
               ) -> tuple[list[int], int, int]:
    """One row, position by position: answer ids, forwards, edits."""
    mask_id = model.config.mask_token_id
    P = len(prompt)
    x = torch.tensor([prompt + [mask_id] * G])
    nfe = edits = 0
    for lo in range(P, P + G, L):
        undecided = [lo + i for i in range(L)]
        soft: dict[int, torch.Tensor] = {}
        for _ in range(L):
            embeds = model.embed(x).clone()
            where = torch.zeros_like(x, dtype=torch.bool)
            for pos, p in soft.items():
                embeds[0, pos] = _soft(model, int(x[0, pos]), p, mask_id)
                where[0, pos] = True
            with torch.no_grad():
                logits = model(x, embed_override=(where, embeds))[0].float()
            nfe += 1
            probs = torch.softmax(logits, dim=-1)
            choice = logits.clone()
            choice[:, mask_id] = float("-inf")
            x0 = choice.argmax(dim=-1)
            p = probs.gather(1, x0[:, None])[:, 0]
            masked = [i for i in undecided if int(x[0, i]) == mask_id]
            commit = []
            for i in masked:  # left to right until the first below the threshold
                if float(p[i]) < threshold:
                    break
                commit.append(i)
            commit = commit or masked[:1]
            changed = False
            for i in undecided:
                if i in commit or (i not in masked and int(x0[i]) != int(x[0, i])):
                    edits += i not in masked
                    x[0, i] = x0[i]
                    changed = True
            if all(float(p[i]) >= settle for i in undecided) or not changed:
                break
            soft = {i: p[i] for i in undecided if int(x[0, i]) != mask_id}
    return x[0, P:].tolist(), nfe, edits


SETTINGS = [(0.5, 0.9, 4), (0.0, 0.9, 4), (0.3, 0.6, 8)]


@pytest.mark.parametrize(("threshold", "settle", "block"), SETTINGS)
def test_dmax_decodes_as_the_reference_loop(llada2, threshold, settle, block):
    prompts = prompts_for(llada2, (8, 8, 8), seed=1)
    out = spec_generate(llada2, torch.tensor(prompts), None, gen_length=16, block_length=block,
                        policy=build_policy("dmax", threshold=threshold, settle=settle), confidence_precision="float32")
    for b, prompt in enumerate(prompts):
        tokens, nfe, edits = _reference(llada2, prompt, 16, block, threshold, settle)
        assert (out.tokens[b].tolist(), out.records[b].nfe, out.records[b].edits) == (tokens, nfe, edits)
    assert sum(r.edits for r in out.records) > 0  # the settings exercise the rewriting


def test_dmax_on_the_trained_tiny_llada_and_in_bf16():
    """The committed tiny LLaDA in float32 and bfloat16: every answer position committed, edits counted per step."""
    for dtype in (torch.float32, torch.bfloat16):
        model = tiny_model("llada", dtype)
        prompts = prompts_for(model, (10, 10), seed=2)
        out = spec_generate(model, torch.tensor(prompts), None, gen_length=16, block_length=8,
                            policy=build_policy("dmax"), confidence_precision="float32", trace=True)
        assert (out.tokens != model.config.mask_token_id).all()
        for rec in out.records:
            assert sum(t.n_edited for t in rec.trace) == rec.edits
            assert sum(t.n_committed for t in rec.trace) == 16


def test_batch_decodes_as_each_row_alone(llada2):
    prompts = prompts_for(llada2, (8, 8, 8), seed=3)
    policy = build_policy("dmax", threshold=0.3)
    batch = spec_generate(llada2, torch.tensor(prompts), None, gen_length=16, block_length=4, policy=policy,
                          confidence_precision="float32")
    for b, p in enumerate(prompts):
        alone = spec_generate(llada2, torch.tensor([p]), None, gen_length=16, block_length=4, policy=policy,
                              confidence_precision="float32")
        assert batch.tokens[b].tolist() == alone.tokens[0].tolist()
        assert (batch.records[b].nfe, batch.records[b].edits) == (alone.records[0].nfe, alone.records[0].edits)


def test_an_adaptive_rule_commits_the_masks(llada2):
    prompts = prompts_for(llada2, (8,), seed=4)
    out = spec_generate(llada2, torch.tensor(prompts), None, gen_length=16, block_length=4,
                        policy=build_policy("dmax"), rule=build_rule("threshold", threshold=0.3),
                        confidence_precision="float32")
    assert (out.tokens != llada2.config.mask_token_id).all()


@pytest.mark.parametrize(("cache", "rule", "cfg", "needle"), [
    ("prefix", None, 0.0, "without a cache"),
    ("none", "topk", 0.0, "fixed-count rule"),
    ("none", "entropy_threshold", 0.0, "other units"),
    ("none", None, 1.0, "classifier-free guidance"),
])
def test_refused_combinations(cache, rule, cfg, needle):
    with pytest.raises(ValueError, match=needle):
        DecodeSpec(Decoding(16, 8, build_policy("dmax"), build_rule(rule) if rule else None, build_cache(cache)),
                   Sampling(cfg_scale=cfg))


@pytest.mark.parametrize(("params", "needle"), [({"threshold": 1.5}, "threshold must be"),
                                                ({"threshold": 0.95}, "must be <= settle"),
                                                ({"tau": 0.5}, "unknown")])
def test_bad_parameters_are_refused(params, needle):
    with pytest.raises(ValueError, match=needle):
        build_policy("dmax", **params)


def test_dream_models_are_refused(dream):
    with pytest.raises(ValueError, match="shifted"):
        spec_generate(dream, torch.tensor([prompts_for(dream, (5,))[0]]), None, gen_length=16, block_length=8,
                      policy=build_policy("dmax"))
