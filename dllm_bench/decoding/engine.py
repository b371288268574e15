"""The generate loop: policy -> forward (under a cache) -> confidences at candidates -> commit -> account.

One loop for every policy, rule and cache: it calls their declared hooks, whose defaults do nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dllm_bench.decoding.accounting import SampleRecord, StepTrace, count_generated_tokens
from dllm_bench.decoding.commit_masks import sort_candidates
from dllm_bench.decoding.confidence import Workspace, candidate_predictions, resolve_precision, row_generators
from dllm_bench.decoding.config import Cache, Policy, Rule
from dllm_bench.decoding.forward import ForwardResult, ForwardRunner, HostView
from dllm_bench.decoding.rules import StepContext
from dllm_bench.decoding.rules.base import NO_RULE_HOOKS
from dllm_bench.decoding.spec import DecodeSpec
from dllm_bench.models.host import host_reads_free


@dataclass
class GenerationOutput:
    """``tokens`` [B, gen_length] answer ids; one ``SampleRecord`` per row."""

    tokens: torch.Tensor
    records: list[SampleRecord]


def _config_value(model, name: str, given):
    if given is not None:
        return given
    config = getattr(model, "config", None)
    value = getattr(config, name, None)
    if value is None:
        raise ValueError(f"{name} is not given and model.config has none")
    return value


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _trace_step(step: int, conf: torch.Tensor, cand: torch.Tensor, commit: torch.Tensor, rows: list[int],
                rule, edited: torch.Tensor | None) -> list[StepTrace]:
    """StepTrace of each active row (``rows``), with the rule's own terms where it committed and the committed
    tokens the policy edited (``edited`` [B, G], None: none)."""
    sorted_conf, _, n_cand = sort_candidates(conf, cand)
    n_commit = commit.sum(dim=1)
    terms = {key: value.tolist() for key, value in rule.trace_terms(sorted_conf, n_commit).items()}
    n_cand, n_commit = n_cand.tolist(), n_commit.tolist()
    n_edit = [0] * conf.shape[0] if edited is None else edited.sum(dim=1).tolist()
    out = []
    for b in rows:
        entry = StepTrace(step, sorted_conf[b, : n_cand[b]].double().tolist(), n_commit[b], n_edit[b])
        for key, value in terms.items() if n_commit[b] > 0 else ():
            setattr(entry, key, value[b])
        out.append(entry)
    return out


def generate(
    model: Callable,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    spec: DecodeSpec,
    *,
    reference: torch.Tensor | None = None,
    model_kwargs: dict | None = None,
) -> GenerationOutput:
    """Decode ``spec.decoding.gen_length`` masked positions after left-padded prompts; tokens and per-row records.

    ``attention_mask`` None = every prompt position is real; ``reference`` [B, gen_length] is the oracle rule's
    reference decode; ``model_kwargs`` go to every forward (e.g. a vision model's image embeddings). The loop
    asks the policy, its rule and the cache through their hooks (``policies/base.py``, ``rules/base.py``,
    ``caches/base.py``), never which one it holds.
    """
    if not isinstance(spec, DecodeSpec):
        raise TypeError(f"spec must be a DecodeSpec (dllm_bench.decoding.spec), got {type(spec).__name__}")
    gen_length, block_length = spec.decoding.gen_length, spec.decoding.block_length
    policy, rule, cache, early_stop = (spec.decoding.policy, spec.decoding.rule, spec.decoding.cache,
                                           spec.decoding.early_stop)
    hooks = NO_RULE_HOOKS if rule is None else rule  # the rule's hooks (defaults for a policy's own rule)
    sampling = spec.sampling
    confidence_precision, temperature, cfg_scale = sampling.confidence_precision, sampling.temperature, sampling.cfg_scale
    confidence_mask_in_softmax = sampling.confidence_mask_in_softmax
    forbidden_token_ids, seed = sampling.forbidden_token_ids, sampling.seed
    trace, tokenizer, stop_strings = spec.accounting.trace, spec.accounting.tokenizer, spec.accounting.stop_strings
    config = getattr(model, "config", None)
    flavour = getattr(config, "flavour", None)
    if isinstance(flavour, str):
        cache.check_flavour(flavour, policy.name)
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, P], got shape {tuple(input_ids.shape)}")
    measure = spec.measure
    mask_id = int(_config_value(model, "mask_token_id", spec.token_ids.mask))
    stop_token_ids, pad_token_id = spec.token_ids.stop, spec.token_ids.pad
    stops = list(stop_token_ids) if stop_token_ids is not None else list(getattr(model.config, "stop_token_ids", []) or [])
    ends_early = policy.ends_rows_early()  # what may end a row before its answer is committed (DPad's EOS check)
    if early_stop and not stops:
        raise ValueError("early_stop needs stop token ids (EOS/EoT) from spec.token_ids.stop or model.config")
    if ends_early is not None and not stops:
        raise ValueError(f"{ends_early} needs stop token ids (EOS first) from spec.token_ids.stop or model.config")
    if pad_token_id is None:
        pad_token_id = getattr(config, "pad_token_id", None)
    B, P = input_ids.shape
    G = gen_length
    device = input_ids.device
    # one host check per decode: without padding no mask reaches the network (SDPA may then pick Flash)
    padded = attention_mask is not None and not bool(attention_mask.bool().all())
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if reference is not None and tuple(reference.shape) != (B, G):
        raise ValueError(f"reference must be [B, gen_length] = {(B, G)}, got {tuple(reference.shape)}")

    x = torch.cat([input_ids, torch.full((B, G), mask_id, dtype=input_ids.dtype, device=device)], dim=1)
    full_mask = torch.cat([attention_mask, torch.ones((B, G), dtype=attention_mask.dtype, device=device)], dim=1)
    runner = ForwardRunner(model, cache, P, full_mask, model_kwargs, cfg_scale, mask_id, padded=padded,
                           dropout=policy.dropout(G, seed, B, device), block_length=block_length)
    state = policy.init_state(B, G, block_length, device)
    if cache.holds_full_blocks:  # the cache's published batch loop: rows leave a block together
        policy.hold_blocks(state)
    rule_state = hooks.init_state(B, G, block_length, device)
    # a rule whose commits are known before the forward (its own drawn order): the cache sees them in the host view;
    # it draws over each row's own canvas (real prompt + answer), as the row decoded alone would (one read a decode)
    canvas_lengths = (attention_mask.sum(dim=1) + G).tolist() if hooks.plans else None
    samples = temperature > 0 or measure == "random"  # the predictions draw noise per row
    # one generator per row; a planning rule's draws come first in it, as the published loop draws its order
    # from the stream its sampling noise comes from
    generators = row_generators(seed, B, device) if (samples or hooks.plans) else None
    workspace = Workspace()
    stop_ids = torch.tensor(stops, dtype=x.dtype, device=device) if stops and early_stop else None
    stop_id = stops[0] if stops else None
    # the mask token is never a prediction: committing it would leave the position masked forever
    forbidden = tuple(dict.fromkeys([*forbidden_token_ids, *(() if confidence_mask_in_softmax else (mask_id,))]))
    unchosen = (mask_id,) if confidence_mask_in_softmax else ()
    policy.check_model(config)
    policy.place_prompt(state, attention_mask, config)  # where each row's answer sits (block diffusion's grid)

    # per-row counters stay on the device and are read once, after the loop
    active = torch.ones(B, dtype=torch.bool, device=device)
    all_rows = torch.arange(B, device=device)
    nfe = torch.zeros(B, dtype=torch.long, device=device)
    positions = torch.zeros(B, dtype=torch.long, device=device)
    edits = torch.zeros(B, dtype=torch.long, device=device)
    finish_step = torch.zeros(B, dtype=torch.long, device=device)
    step_times: list[float] = []  # seconds from the start to the end of each step
    traces: list[list[StepTrace]] = [[] for _ in range(B)]
    step = 0
    _synchronize(device)
    t0 = time.perf_counter()
    dtype = None
    j = torch.arange(G, device=device).unsqueeze(0)
    view = _host_view(policy, state, active, x[:, P:] == mask_id)
    with torch.no_grad():
        while view.rows:
            rows = all_rows if len(view.rows) == B else active.nonzero().squeeze(1)
            answer = x[:, P:]
            masked = answer == mask_id
            lo, hi = policy.window(state)
            cand = masked & (j >= lo.unsqueeze(1)) & (j < hi.unsqueeze(1)) & active.unsqueeze(1)
            block = policy.block(state)
            read = hooks.read(rule_state, cand, masked, active, block[0])  # the candidates, or more (KLASS)
            read = policy.read(state, read, masked, active)  # or committed positions too (a policy that edits)
            order = hooks.plan(rule_state, view.rows, view.block_lo, generators, canvas_lengths)
            if order is not None:  # the step's commits, known before its forward
                ahead = StepContext(order, cand, answer, masked, reference, state=rule_state, block=block)
                planned = policy.decide(state, ahead, rule)[0] & cand
                view.planned = torch.where(planned, order, float("-inf"))
            runner.embed_override = policy.soft_inputs(state, runner, x, active)  # None: the tokens' own
            results = policy.forward(state, runner, x, rows, read, view)
            if dtype is None:
                dtype = resolve_precision(confidence_precision, results[0].logits.dtype)
            conf = torch.full((B, G), float("-inf"), dtype=dtype, device=device)
            pred = torch.full((B, G), mask_id, dtype=x.dtype, device=device)
            refreshed = torch.zeros(B, dtype=torch.bool, device=device)

            def fuse(logits, target, lo=block[0]):  # the rule's logits at rows target // G, positions target % G
                return hooks.fuse_logits(rule_state, logits, target // G, target % G, lo)

            for res in results:
                _fill_predictions(res, read, conf, pred, P, G, measure, dtype, temperature, forbidden, unchosen,
                                  generators if samples else None, workspace, fuse)
                positions.index_add_(0, res.rows, res.positions)
                refreshed[res.rows] = res.refresh
            read_conf, read_pred = conf, pred
            if read is not cand:  # positions read for the rule's state or the policy's edits are no candidates
                read_conf, read_pred = conf.clone(), pred.clone()
                conf.masked_fill_(~cand, float("-inf"))
                pred.masked_fill_(~cand, mask_id)
            nfe += active.long()
            ctx = StepContext(conf, cand, pred, masked, reference, state=rule_state, block=block,
                              read_confidence=read_conf, read_prediction=read_pred)
            commit, tokens = policy.decide(state, ctx, rule)
            commit = cache.adjust_commit(commit, cand, refreshed, block[0])
            commit &= cand
            answer.copy_(torch.where(commit, tokens, answer))
            edited = policy.revise(state, ctx, answer, active, mask_id)  # rewritten or re-masked committed tokens
            if edited is not None:
                edits += (edited & active.unsqueeze(1)).sum(dim=1)
            if trace:
                for b, entry in zip(view.rows, _trace_step(step, conf, cand, commit, view.rows, hooks, edited),
                                    strict=True):
                    traces[b].append(entry)
            now_masked = answer == mask_id
            finished = policy.finished(state, answer, now_masked, active, stop_id) & active
            if early_stop:
                finished |= active & _answer_complete(answer, policy.unsettled(state, now_masked), stop_ids)
            finish_step = torch.where(finished, step, finish_step)
            active &= ~finished
            step += 1
            view = _host_view(policy, state, active, now_masked)  # the step's one host read: it waits for the step to end
            step_times.append(time.perf_counter() - t0)
    tokens_out = x[:, P:].clone()
    if early_stop or ends_early is not None:
        tokens_out = torch.where(tokens_out == mask_id, stops[0], tokens_out)
    _check_no_mask(tokens_out, mask_id, policy, rule, cache)
    records = []
    counters = torch.stack([nfe, positions, finish_step, edits]).tolist()
    for b in range(B):
        rec = SampleRecord(nfe=counters[0][b], steps=counters[0][b], forward_positions=counters[1][b],
                           wall_time_s=step_times[counters[2][b]] if step_times else 0.0, edits=counters[3][b],
                           trace=traces[b] if trace else None)
        if tokenizer is not None:
            prompt_real = int(((input_ids[b] != stops[0]) & attention_mask[b].bool()).sum()) if stops else int(attention_mask[b].sum())
            rec.token_counts = count_generated_tokens(tokens_out[b], tokenizer, stop_strings or (),
                                                      stop_token_ids=stops, pad_token_id=pad_token_id,
                                                      prompt_length=prompt_real)
        records.append(rec)
    return GenerationOutput(tokens_out, records)


def _host_view(policy: Policy, state, active: torch.Tensor, masked: torch.Tensor) -> HostView:
    """The active rows with their block bounds, canvas limits and masked answer positions, in one host read."""
    lo, hi = policy.block(state)
    limit = policy.canvas_limit(state)
    parts = [active.long(), lo, hi, masked.sum(dim=1)] + ([limit] if limit is not None else [])
    values = torch.stack([p.to(torch.long) for p in parts]).tolist()
    rows = [b for b, a in enumerate(values[0]) if a]
    return HostView(rows, values[1], values[2], values[4] if limit is not None else None, values[3])


def _check_no_mask(tokens: torch.Tensor, mask_id: int, policy: Policy, rule: Rule | None,
                   cache: Cache) -> None:
    """Invariant: no returned answer holds the mask id (a schedule that leaves one is an engine bug)."""
    left = tokens == mask_id
    if bool(left.any()):
        rows = left.any(dim=1).nonzero().squeeze(1).tolist()
        raise RuntimeError(
            f"generate left {int(left.sum())} mask ids in rows {rows} (policy {policy!r}, rule "
            f"{None if rule is None else rule.name!r}, cache {cache!r}): every answer position must be "
            "committed"
        )


def _fill_predictions(res: ForwardResult, cand, conf, pred, P: int, G: int, measure: str, dtype,
                      temperature: float, forbidden, unchosen, generators, workspace: Workspace, fuse=None) -> None:
    """Confidence and x0 at the candidates of ``res.rows`` from that forward's logits (in place); ``fuse`` maps
    the candidates' logits and flat [B, G] indices to the logits the choice is made from (a rule's fusion)."""
    rows = res.rows
    sub_cand = cand.index_select(0, rows)
    counts = None  # candidates per row: read on the host only where noise is drawn per row (or free to read)
    if res.at is not None:  # the logits are the candidates' own rows, in batch order
        local, j = res.at
        if generators is not None or host_reads_free(cand.device):
            counts = torch.bincount(local, minlength=rows.numel()).tolist()
        flat = res.logits
        target = rows.index_select(0, local) * G + j
    else:
        a0 = max(res.start - P, 0)
        a1 = min(res.start + res.logits.shape[1] - P, G)
        inside = sub_cand[:, a0:a1]
        if generators is not None or host_reads_free(cand.device):
            counts = inside.sum(dim=1).tolist()
        w = a1 - a0
        where = inside.reshape(-1).nonzero().squeeze(1)  # candidates in batch order, as flat [b, w] indices
        target = rows.index_select(0, where // w) * G + a0 + where % w  # the same candidates in [B, G]
        flat = _candidate_rows(res.logits[:, P + a0 - res.start: P + a1 - res.start], where, workspace)
    if counts is not None and sum(counts) != int(sub_cand.sum()):
        raise RuntimeError("a candidate lies outside the positions this forward computed (engine bug)")
    if flat.shape[0] == 0:
        return
    gens = [generators[int(r)] for r in rows] if generators is not None else None
    if fuse is not None:
        flat = fuse(flat, target)
    x0, c = candidate_predictions(flat, counts, measure=measure, dtype=dtype, temperature=temperature,
                                  forbidden_token_ids=forbidden, unchosen_token_ids=unchosen, generators=gens,
                                  workspace=workspace)
    conf.view(-1).index_copy_(0, target, c.to(conf.dtype))
    pred.view(-1).index_copy_(0, target, x0.to(pred.dtype))


def _candidate_rows(logits: torch.Tensor, where: torch.Tensor, workspace: Workspace) -> torch.Tensor:
    """Rows ``where`` of the [b, w, V] logits seen as [b * w, V], gathered into a reused buffer (several times
    faster than boolean indexing into a fresh tensor at a 126k vocabulary)."""
    b, w, V = logits.shape
    if logits.stride(2) != 1 or logits.stride(1) != V or (b > 1 and logits.stride(0) != w * V):
        return logits[where // w, where % w]  # the window cuts rows of a batch: gather without copying it
    out = workspace.take("candidate_logits", where.numel(), V, logits.dtype, logits.device)
    return torch.index_select(logits.view(b * w, V), 0, where, out=out)


def _answer_complete(answer: torch.Tensor, masked: torch.Tensor, stop_ids: torch.Tensor) -> torch.Tensor:
    """Rows where a stop token is committed and every position before the first one is committed."""
    is_stop = torch.isin(answer, stop_ids) & ~masked
    G = answer.shape[1]
    j = torch.arange(G, device=answer.device).unsqueeze(0)
    first_stop = torch.where(is_stop, j, G).min(dim=1).values
    masked_before = (masked & (j < first_stop.unsqueeze(1))).any(dim=1)
    return (first_stop < G) & ~masked_before
