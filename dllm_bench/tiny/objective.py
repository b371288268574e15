"""LLaDA's masked-diffusion SFT objective: the prompt is kept, answer tokens are masked with probability t."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def mask_answers(
    answer_ids: torch.Tensor, mask_token_id: int, eps: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward process on answers [B, G]: t ~ U(0, 1) per row, p = (1 - eps) t + eps, mask each token w.p. p.

    Returns (noisy answers [B, G], masked [B, G] bool, p [B, 1]).
    """
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps={eps}: expected 0 < eps < 1")
    batch, length = answer_ids.shape
    t = torch.rand(batch, 1, generator=generator, device=answer_ids.device)
    p_mask = (1.0 - eps) * t + eps
    masked = torch.rand(batch, length, generator=generator, device=answer_ids.device) < p_mask
    noisy = torch.where(masked, torch.full_like(answer_ids, mask_token_id), answer_ids)
    return noisy, masked, p_mask


def masked_diffusion_loss(
    logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor, p_mask: torch.Tensor
) -> torch.Tensor:
    """Cross-entropy on masked answer tokens weighted by 1/p, summed per row, divided by the answer length.

    `logits` [B, G, V] are the answer positions' logits ("logits at i predict token i" for both flavours,
    Dream's shift being inside the network); `targets` are the answer ids [B, G] or target distributions
    [B, G, V]; the mean over rows is the LLaDA SFT loss.
    """
    target = targets if targets.dtype == torch.long else targets.transpose(1, 2)
    ce = F.cross_entropy(logits.transpose(1, 2).float(), target, reduction="none")  # [B, G]
    weighted = torch.where(masked, ce / p_mask, torch.zeros_like(ce))
    return (weighted.sum(dim=1) / masked.shape[1]).mean()


def load_balancing_loss(router_logits: list[torch.Tensor], num_experts: int, top_k: int) -> torch.Tensor:
    """Switch-Transformer load-balancing loss over all MoE layers' router logits [N, E] (the form LLaDA-MoE's
    published modeling file computes as ``aux_loss``): E x sum over slots and experts of (share of tokens whose
    k-th choice is the expert) x (mean router probability of the expert); 1 per slot when routing is uniform.
    """
    logits = torch.cat(router_logits, dim=0)
    probs = F.softmax(logits.float(), dim=-1)  # [N, E]
    chosen = probs.topk(top_k, dim=-1).indices  # [N, k]
    share = F.one_hot(chosen, num_experts).float().mean(dim=0)  # [k, E]
    return (share * probs.mean(dim=0)).sum() * num_experts
