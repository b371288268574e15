"""Commit rules: which masked candidates a step commits, as pure batched functions of confidence.

Every function takes ``confidence`` [B, L] (any float dtype; values off the candidates are ignored) and
``candidates`` [B, L] bool and returns a commit mask [B, L] bool. Committed positions are always a prefix of
the candidates sorted by descending confidence (ties: lower position first). The adaptive rules commit at
least one candidate in every row that has one and never a non-candidate.
"""

from __future__ import annotations

import torch

Param = float | torch.Tensor


def _row_param(value: Param, confidence: torch.Tensor) -> torch.Tensor:
    """A scalar or per-row parameter as a [B, 1] (or broadcasting [1, 1]) tensor in the confidence dtype; a
    Python scalar is filled in on the device (no tensor copied from the host every step)."""
    if not isinstance(value, torch.Tensor):
        return torch.full((1, 1), value, dtype=confidence.dtype, device=confidence.device)
    t = value.to(dtype=confidence.dtype, device=confidence.device)
    if t.dim() == 0:
        return t.expand(confidence.shape[0]).unsqueeze(1)
    return t.reshape(-1, 1)


def sort_candidates(confidence: torch.Tensor, candidates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Candidate confidences sorted descending: (sorted [B, L], order [B, L], n_candidates [B]).

    Sorted values past a row's candidate count are 0 (never -inf, so cumulative sums stay finite).
    """
    floor = torch.finfo(confidence.dtype).min
    keyed = torch.where(candidates, confidence.clamp_min(floor), torch.full_like(confidence, float("-inf")))
    sorted_conf, order = torch.sort(keyed, dim=-1, descending=True, stable=True)
    n_cand = candidates.sum(dim=-1)
    ranks = torch.arange(confidence.shape[-1], device=confidence.device)
    sorted_conf = torch.where(ranks < n_cand.unsqueeze(1), sorted_conf, torch.zeros_like(sorted_conf))
    return sorted_conf, order, n_cand


def prefix_commit_mask(order: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Mask [B, L] selecting the first ``counts[b]`` positions of ``order[b]``."""
    ranks = torch.arange(order.shape[-1], device=order.device)
    keep_sorted = ranks < counts.unsqueeze(1)
    return torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)


def _at_least_one(counts: torch.Tensor, n_cand: torch.Tensor) -> torch.Tensor:
    return torch.where(n_cand > 0, counts.clamp(min=1), torch.zeros_like(counts)).minimum(n_cand)


def topk_count(confidence: torch.Tensor, candidates: torch.Tensor, k: int | torch.Tensor) -> torch.Tensor:
    """Commit count of the fixed-step rule: min(k, #candidates) per row (k may be 0)."""
    n_cand = candidates.sum(dim=-1)
    if not isinstance(k, torch.Tensor):  # a Python int: no tensor copied to the device
        return n_cand.clamp(max=max(int(k), 0))
    k_t = k.to(device=confidence.device, dtype=n_cand.dtype).expand_as(n_cand)
    return k_t.clamp(min=0).minimum(n_cand)


def topk_commit_mask(confidence: torch.Tensor, candidates: torch.Tensor, k: int | torch.Tensor) -> torch.Tensor:
    """The k most confident candidates per row (k int or [B]); the fixed-step LLaDA/Dream baseline."""
    _, order, _ = sort_candidates(confidence, candidates)
    return prefix_commit_mask(order, topk_count(confidence, candidates, k))


def threshold_count(confidence: torch.Tensor, candidates: torch.Tensor, threshold: Param) -> torch.Tensor:
    """Number of candidates with confidence >= threshold, at least one (Fast-dLLM threshold rule)."""
    passing = (candidates & (confidence >= _row_param(threshold, confidence))).sum(dim=-1)
    return _at_least_one(passing, candidates.sum(dim=-1))


def threshold_commit_mask(confidence: torch.Tensor, candidates: torch.Tensor, threshold: Param) -> torch.Tensor:
    """Every candidate with confidence >= threshold; the single most confident one if none qualifies."""
    _, order, _ = sort_candidates(confidence, candidates)
    return prefix_commit_mask(order, threshold_count(confidence, candidates, threshold))


def factor_count_sorted(sorted_conf: torch.Tensor, n_cand: torch.Tensor, f: Param, compat: bool = False) -> torch.Tensor:
    """Factor rule on sorted confidences: largest n with (n+1)(1 - c(n)) < f, at least one.

    ``compat=True`` reproduces the Fast-dLLM code: ``<=`` (as c(n) >= 1 - f/(n+1)), the scan stops at
    the first failure, and a failure at the last candidate still commits every candidate.
    """
    n = torch.arange(1, sorted_conf.shape[-1] + 1, device=sorted_conf.device, dtype=sorted_conf.dtype)
    f_t = _row_param(f, sorted_conf)
    within = n.unsqueeze(0) <= n_cand.unsqueeze(1)
    if not compat:
        passing = ((n + 1) * (1 - sorted_conf) < f_t) & within
        return _at_least_one(passing.sum(dim=-1), n_cand)
    passing = (sorted_conf >= 1 - f_t / (n + 1)) & within
    passing[:, 0] = within[:, 0]
    leading = passing.to(torch.int64).cumprod(dim=-1).sum(dim=-1)
    return torch.where(leading >= n_cand - 1, n_cand, leading)


def factor_commit_mask(
    confidence: torch.Tensor, candidates: torch.Tensor, f: Param, compat: bool = False
) -> torch.Tensor:
    """Fast-dLLM factor rule (paper's strict form by default; ``compat`` = the published loop)."""
    sorted_conf, order, n_cand = sort_candidates(confidence, candidates)
    return prefix_commit_mask(order, factor_count_sorted(sorted_conf, n_cand, f, compat))


def frechet_gap_sorted(sorted_conf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fréchet gap G_n = L_n - U_n per prefix n, and its factor core 1 - (n+1)(1 - c(n)).

    L_n = max(0, sum_{j<=n} c(j) - (n-1)) is the Fréchet lower bound on all n being right, U_n = 1 - c(n)
    bounds the best excluded candidate. G_n - core is the heterogeneity bonus sum_{j<=n} (c(j) - c(n))
    (while L_n > 0).
    """
    n = torch.arange(1, sorted_conf.shape[-1] + 1, device=sorted_conf.device, dtype=sorted_conf.dtype)
    lower = (sorted_conf.cumsum(dim=-1) - (n - 1)).clamp_min(0)
    gap = lower - (1 - sorted_conf)
    core = 1 - (n + 1) * (1 - sorted_conf)
    return gap, core


def frechet_count_sorted(sorted_conf: torch.Tensor, n_cand: torch.Tensor, delta: Param) -> torch.Tensor:
    """Largest prefix with G_n > delta (G_n never increases with n), at least one."""
    gap, _ = frechet_gap_sorted(sorted_conf)
    n = torch.arange(1, sorted_conf.shape[-1] + 1, device=sorted_conf.device)
    passing = (gap > _row_param(delta, sorted_conf)) & (n.unsqueeze(0) <= n_cand.unsqueeze(1))
    return _at_least_one(passing.sum(dim=-1), n_cand)


def frechet_commit_mask(confidence: torch.Tensor, candidates: torch.Tensor, delta: Param) -> torch.Tensor:
    """Fast-dLLM++ Fréchet profile rule with margin delta."""
    sorted_conf, order, n_cand = sort_candidates(confidence, candidates)
    return prefix_commit_mask(order, frechet_count_sorted(sorted_conf, n_cand, delta))


def oracle_commit_mask(
    confidence: torch.Tensor, candidates: torch.Tensor, prediction: torch.Tensor, reference: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Oracle rule: commit every candidate whose prediction already equals the reference token.

    A row with candidates but no match commits its most confident candidate with the reference token
    (a forced commit), so the decode always reproduces the reference. Returns (commit mask, forced mask).
    """
    match = candidates & (prediction == reference)
    needs_force = candidates.any(dim=-1) & ~match.any(dim=-1)
    top1 = topk_commit_mask(confidence, candidates, 1)
    forced = top1 & needs_force.unsqueeze(1)
    return match | forced, forced
