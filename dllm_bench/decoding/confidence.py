"""Token choice and confidence, computed only at candidate positions.

The published LLaDA code takes a float64 softmax over the whole canvas and vocabulary every step; here the
logits of the candidates ([N, V], N = masked positions in the window) are gathered first, and for the usual
case (top-1 probability, greedy, a confidence dtype at least as precise as the logits) the choice is a max
over the logits themselves and the confidence exp(l_x0) / sum(exp(l)) from one copy in the confidence dtype
(in float64 no shift by the max is needed for logits within +-600; float32 and extreme logits subtract it): at
a 126k vocabulary the float64 cast, a second copy for forbidden ids and the full softmax cost up to a fifth of
the LM head. The max and its index come in two levels (:func:`row_max`), not from
``max(dim)``, which does not vectorise on the CPU. Any other case takes the direct route (cast, mask,
softmax). The mask token is never chosen but stays in the softmax denominator, as in the published code
(``unchosen_token_ids``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dllm_bench.models.host import host_reads_free

MEASURES = ("top1_prob", "margin", "neg_entropy", "random")
# Dream's negative entropy adds this to every probability before the log (finite at p = 0; in bf16 the rounding
# of p + eps and of each product is what the published loop ranks by)
ENTROPY_EPS = 1e-10
# scratch bound of one chunk of confidence rows, as float64 [rows, V] (see candidate_predictions)
CHUNK_BYTES = 1 << 30
PRECISIONS = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def row_generators(seed: int | Sequence[int], batch: int, device: torch.device) -> list[torch.Generator]:
    """One generator per row, seeded with ``seed`` (an int for every row, or one int per row)."""
    seeds = [seed] * batch if isinstance(seed, int) else list(seed)
    if len(seeds) != batch:
        raise ValueError(f"seed must be an int or one int per row ({batch}), got {len(seeds)} seeds")
    return [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]


def resolve_precision(precision: str | torch.dtype | None, model_dtype: torch.dtype) -> torch.dtype:
    """Confidence dtype from a name ('float64', ..., 'model' = the logits' dtype) or a torch dtype."""
    if isinstance(precision, torch.dtype):
        return precision
    if precision is None or precision == "model":
        return model_dtype
    if precision not in PRECISIONS:
        raise ValueError(f"confidence precision {precision!r} is not one of {sorted(PRECISIONS)} or 'model'")
    return PRECISIONS[precision]


def check_measure(measure: str) -> str:
    """Validate a confidence measure name."""
    if measure not in MEASURES:
        raise ValueError(f"confidence measure {measure!r} is not one of {MEASURES}")
    return measure


def _uniform_rows(counts: Sequence[int], shape_tail: tuple[int, ...], generators, dtype, device) -> torch.Tensor:
    """U(0,1) draws for each row's candidates from that row's own generator (batch-independent noise)."""
    parts = [
        torch.rand((n, *shape_tail), generator=g, dtype=dtype, device=device)
        for n, g in zip(counts, generators)
        if n > 0
    ]
    if not parts:
        return torch.empty((0, *shape_tail), dtype=dtype, device=device)
    return torch.cat(parts, dim=0)


class Workspace:
    """Buffers reused across the steps of one decode: at 126k ids a fresh 8-16 MB tensor every step costs its
    page faults, about as much as the arithmetic on it."""

    def __init__(self) -> None:
        self._buffers: dict[tuple, torch.Tensor] = {}

    def take(self, name: str, rows: int, cols: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """An uninitialised [rows, cols] view of buffer ``name`` (grown when a step needs more rows)."""
        key = (name, cols, dtype, device)
        buf = self._buffers.get(key)
        if buf is None or buf.shape[0] < rows:
            buf = self._buffers[key] = torch.empty((rows, cols), dtype=dtype, device=device)
        return buf[:rows]

    def ids(self, ids: list[int], device: torch.device) -> torch.Tensor:
        """``ids`` as a long tensor on ``device``, copied from the host once per decode."""
        key = ("ids", tuple(ids), device)
        found = self._buffers.get(key)
        if found is None:
            found = self._buffers[key] = torch.tensor(ids, dtype=torch.long, device=device)
        return found


def row_max(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Max of each row of [N, V] and its first index (``max(dim=-1)``'s values and tie rule).

    Two levels: the max of each run of k ids, then the first run holding the row's max, then the first index
    inside that run. At V = 126 464 on the CPU this is several times faster than ``max(dim)`` with indices,
    which does not vectorise.
    """
    n, v = logits.shape
    k = next((k for k in (128, 64, 32) if v % k == 0 and v >= 4 * k), None)
    if k is None or not logits.is_contiguous():
        values, index = logits.max(dim=-1)
        return values, index
    runs = logits.view(n, v // k, k)
    run_max = runs.amax(dim=-1)
    run = run_max.argmax(dim=-1)
    rows = torch.arange(n, device=logits.device)
    return run_max[rows, run], run * k + runs[rows, run].argmax(dim=-1)


def allowed_max(logits: torch.Tensor, excluded: Sequence[int],
                excluded_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Largest logit outside ``excluded`` and its index per row (the first one on ties, as ``argmax``), and
    each row's overall max.

    On the CPU only rows whose overall maximum is an excluded id are copied and masked, so the [N, V] logits
    are read once in the usual case; elsewhere (where finding those rows is a host read) every row's max is
    taken again over a copy with the excluded ids masked: the same values and indices. ``excluded_ids`` is
    ``excluded`` as a tensor on the logits' device (made here when not given).
    """
    overall, index = row_max(logits)
    values = overall
    if not excluded:
        return values, index, overall
    ids = excluded_ids if excluded_ids is not None else torch.tensor(list(excluded), device=logits.device)
    if not host_reads_free(logits.device):
        return (*row_max(logits.index_fill(1, ids, float("-inf"))), overall)
    hit = index == excluded[0]
    for token in excluded[1:]:  # a handful of ids: cheaper than comparing against an id tensor
        hit |= index == token
    bad = hit.nonzero().squeeze(1)
    if bad.numel():
        sub = logits.index_select(0, bad).index_fill_(1, ids, float("-inf"))
        sub_values, sub_index = row_max(sub)
        values, index = values.index_copy(0, bad, sub_values), index.index_copy(0, bad, sub_index)
    return values, index, overall


# In float64, exp(l) / sum(exp(l)) needs no shift by the max while every row's max lies in this range: no term
# overflows (126k * e^690 < e^709) and the terms that underflow weigh under e^-100 of the largest.
_UNSHIFTED_MIN, _UNSHIFTED_MAX = -600.0, 690.0


def _fast_top1(logits: torch.Tensor, dtype: torch.dtype, forbidden: list[int], kept: list[int],
               workspace: Workspace | None) -> tuple[torch.Tensor, torch.Tensor]:
    """x0 (never forbidden or kept) and its softmax probability over every id but the forbidden ones, in
    ``dtype``: one max, one copy, one exp, one sum (and a shift by the max in float32, or for extreme logits)."""
    ids = _ids(workspace, forbidden + kept, logits.device)
    top, x0, overall = allowed_max(logits, forbidden + kept, ids)
    if not forbidden:
        shift = overall  # the denominator's max: every id takes part
    else:
        shift = torch.maximum(top, logits.index_select(1, _ids(workspace, kept, logits.device)).amax(dim=-1)) if kept else top
    if workspace is None:
        weights = logits.to(dtype, copy=True)
    else:
        weights = workspace.take("exp", *logits.shape, dtype, logits.device).copy_(logits)
    if dtype != torch.float64:
        # cast, then subtract in place: a promoting torch.sub(float32, float64) takes an unvectorised loop
        weights.sub_(shift.to(dtype).unsqueeze(1))
    else:
        # only rows outside the range are shifted (the others subtract 0: every bit as it is), so a row's bits do
        # not depend on the other rows (chunks, batch); the CPU skips the pass when no row needs it
        extreme = (shift < _UNSHIFTED_MIN) | (shift > _UNSHIFTED_MAX)
        if not host_reads_free(logits.device) or bool(extreme.any()):
            weights.sub_(torch.where(extreme, shift.to(dtype), 0.0).unsqueeze(1))
    weights.exp_()
    if forbidden:
        weights.index_fill_(1, _ids(workspace, forbidden, logits.device), 0.0)
    return x0, weights.gather(1, x0.unsqueeze(1)).squeeze(1) / weights.sum(dim=-1)


def _ids(workspace: Workspace | None, ids: list[int], device: torch.device) -> torch.Tensor | None:
    """Token ids as a tensor on ``device``, made once per decode when a workspace keeps it."""
    if not ids:
        return None
    if workspace is None:
        return torch.tensor(ids, dtype=torch.long, device=device)
    return workspace.ids(ids, device)


def candidate_predictions(
    logits: torch.Tensor,
    counts: Sequence[int],
    *,
    measure: str = "top1_prob",
    dtype: torch.dtype = torch.float64,
    temperature: float = 0.0,
    forbidden_token_ids: Sequence[int] = (),
    unchosen_token_ids: Sequence[int] = (),
    generators: Sequence[torch.Generator] | None = None,
    workspace: Workspace | None = None,
    chunk_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token choice x0 [N] and confidence [N] from candidate logits [N, V] (rows in batch order).

    ``counts`` gives how many of the N candidates belong to each batch row, so noise (Gumbel for
    temperature > 0, uniform for the 'random' measure) is drawn from each row's own generator.
    Temperature follows the LLaDA code: x0 = argmax(exp(l) / (-log U)^T) in float64, confidence from the
    untempered softmax. ``forbidden_token_ids`` are out of the choice and of the softmax (banned ids);
    ``unchosen_token_ids`` are never chosen but stay in the softmax denominator (the mask token: the published
    code takes the softmax over the whole vocabulary). ``workspace`` lends the [N, V] scratch buffer.
    Without sampling noise the rows go in chunks of ``chunk_rows`` (default: a float64 copy of ``CHUNK_BYTES``),
    so a whole-answer window at batch 32 needs a few GB of scratch, not 100 (same bits: every step is per row).
    """
    forbidden = list(dict.fromkeys(int(i) for i in forbidden_token_ids))
    kept = [i for i in dict.fromkeys(int(i) for i in unchosen_token_ids) if i not in forbidden]
    rows = chunk_rows if chunk_rows is not None else max(1, CHUNK_BYTES // (8 * max(logits.shape[-1], 1)))
    if logits.shape[0] > rows and temperature == 0 and measure != "random":
        # every step below works row by row: chunks of rows give the same bits with a bounded scratch
        parts = [_predictions(logits[i:i + rows], counts, measure, dtype, temperature, forbidden, kept, generators,
                              workspace) for i in range(0, logits.shape[0], rows)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    return _predictions(logits, counts, measure, dtype, temperature, forbidden, kept, generators, workspace)


def _predictions(logits: torch.Tensor, counts: Sequence[int] | None, measure: str, dtype: torch.dtype,
                 temperature: float, forbidden: list[int], kept: list[int], generators, workspace: Workspace | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`candidate_predictions` on one set of rows."""
    # casting up to dtype is exact and keeps order and ties, so the max can be taken on the logits themselves
    exact = torch.promote_types(logits.dtype, dtype) == dtype
    if temperature == 0 and exact and measure in ("top1_prob", "random"):
        # float32 is the published loops' own precision: there the confidence is torch.softmax's bits (below), whose
        # internal sum rounds differently from the fast path's
        if measure == "top1_prob" and dtype == torch.float64:
            return _fast_top1(logits, dtype, forbidden, kept, workspace)
        if measure == "random":
            if generators is None:
                raise ValueError("the 'random' confidence measure needs per-row generators")
            choice = allowed_max(logits, forbidden + kept, _ids(workspace, forbidden + kept, logits.device))[1]
            return choice, _uniform_rows(counts, (), generators, dtype, logits.device)
    work = logits.to(dtype)
    if forbidden:
        work = work.clone() if work is logits else work
        work.index_fill_(1, _ids(workspace, forbidden, work.device), float("-inf"))
    probs_from = work
    if kept:
        work = work.index_fill(1, _ids(workspace, kept, work.device), float("-inf"))
    if temperature > 0:
        if generators is None:
            raise ValueError("temperature > 0 needs per-row generators")
        noise = _uniform_rows(counts, (work.shape[-1],), generators, torch.float64, work.device)
        gumbel = work.to(torch.float64) - temperature * torch.log(-torch.log(noise))
        x0 = gumbel.argmax(dim=-1)
    else:
        x0 = work.argmax(dim=-1)
    if measure == "random":
        if generators is None:
            raise ValueError("the 'random' confidence measure needs per-row generators")
        return x0, _uniform_rows(counts, (), generators, dtype, work.device)
    if measure == "top1_prob":
        conf = torch.softmax(probs_from, dim=-1).gather(-1, x0.unsqueeze(-1)).squeeze(-1)
    elif measure == "margin":
        probs = torch.softmax(probs_from, dim=-1)
        if kept:
            probs.index_fill_(1, _ids(workspace, kept, probs.device), 0.0)  # the two most probable choosable ids
        top2 = probs.topk(2, dim=-1).values
        conf = top2[:, 0] - top2[:, 1]
    elif measure == "neg_entropy":  # as Dream's sample_tokens: sum p log(p + 1e-10), in the confidence dtype
        probs = torch.softmax(probs_from, dim=-1)
        conf = (probs * torch.log(probs + ENTROPY_EPS)).sum(dim=-1)
    else:
        raise ValueError(f"confidence measure {measure!r} is not one of {MEASURES}")
    return x0, conf
