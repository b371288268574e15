"""The tiny models' training objectives: LLaDA's masked-diffusion SFT (the prompt is kept, answer tokens are masked
with probability t) and its block-diffusion form (every block noised with its own t, seeing the clean blocks before)."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass
class BlockDiffusionBatch:
    """One forward's canvas for the block-diffusion objective (the published block-diffusion training: every block
    noised at once, each seeing the clean blocks before it).

    The canvas is ``[prefix | noisy tail | clean tail]``: the prompt's whole blocks once (never noised), then the
    rest (the prompt's last partial block and the answer) twice, noised and clean, both at the same position ids so
    the absolute block grid and RoPE are those of one sequence. ``pair_mask`` [S, S] (on top of the network's
    block-causal mask) lets a noisy query see its own noisy block and the clean blocks before it, and a clean query
    the clean canvas only.
    """

    input_ids: torch.Tensor  # [B, S]
    position_ids: torch.Tensor  # [B, S]
    pair_mask: torch.Tensor  # [S, S] bool
    masked: torch.Tensor  # [B, G] bool: answer tokens replaced by the mask token
    p_mask: torch.Tensor  # [B, G]: their masking probability (each block's own t)
    answer_blocks: torch.Tensor  # [G] long: block of every answer position on the absolute grid
    noisy_answer: torch.Tensor  # [G] long: canvas index of each answer position in the noisy tail
    clean_shift: torch.Tensor  # [G] long: canvas index of the clean state before each answer position
    block_size: int

    def logit_sources(self, shift_logits: bool) -> torch.Tensor:
        """Canvas index [G] whose own logits predict each answer token: the token's noisy position, or with the
        shift (logits at i predict i + 1) the state before it, from the noisy copy inside a block and from the
        clean copy across a block boundary (the committed previous block, as the decoder's store forward has it)."""
        if not shift_logits:
            return self.noisy_answer
        prev = self.noisy_answer - 1  # its canvas index in the prefix or the noisy tail
        return torch.where(self.position_ids[0, prev] // self.block_size == self.answer_blocks, prev, self.clean_shift)


def block_noise(batch: int, prompt_length: int, answer_length: int, block_size: int, eps: float,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked [B, G] bool, p [B, G]): t ~ U(0, 1) per row and answer block, each answer token masked w.p.
    (1 - eps) t + eps of its block (the prompt's partial last block shares its t with the answer tokens in it)."""
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps={eps}: expected 0 < eps < 1")
    blocks = torch.arange(prompt_length, prompt_length + answer_length) // block_size
    local = blocks - blocks[0]
    t = torch.rand(batch, int(local[-1]) + 1, generator=generator)
    p_mask = ((1.0 - eps) * t + eps)[:, local]
    masked = torch.rand(batch, answer_length, generator=generator) < p_mask
    return masked, p_mask


def block_diffusion_batch(prompts: torch.Tensor, answers: torch.Tensor, mask_token_id: int, block_size: int,
                          eps: float, generator: torch.Generator | None = None) -> BlockDiffusionBatch:
    """The doubled canvas of prompts [B, P] and answers [B, G] with each answer block noised (:func:`block_noise`)."""
    b, p_len = prompts.shape
    g_len = answers.shape[1]
    masked, p_mask = block_noise(b, p_len, g_len, block_size, eps, generator)
    clean = torch.cat([prompts, answers], dim=1)  # [B, L]
    noisy = clean.clone()
    noisy[:, p_len:] = torch.where(masked, torch.full_like(answers, mask_token_id), answers)
    length = p_len + g_len
    cut = (p_len // block_size) * block_size  # the prompt's whole blocks: shared by both copies
    pos = torch.cat([torch.arange(length), torch.arange(cut, length)])  # [S]
    blocks = pos // block_size
    part = torch.cat([torch.zeros(cut, dtype=torch.long), torch.ones(length - cut, dtype=torch.long),
                      torch.full((length - cut,), 2)])  # 0 prefix, 1 noisy, 2 clean
    q_part, k_part = part[:, None], part[None, :]
    same_block = blocks[:, None] == blocks[None, :]
    earlier = blocks[None, :] < blocks[:, None]
    pair = ((k_part == 0)
            | ((q_part == 1) & (k_part == 1) & same_block)
            | ((q_part == 1) & (k_part == 2) & earlier)
            | ((q_part == 2) & (k_part == 2)))
    input_ids = torch.cat([noisy, clean[:, cut:]], dim=1)
    noisy_answer = torch.arange(p_len, length)
    answer_blocks = noisy_answer // block_size
    clean_prev = (noisy_answer - 1) + (length - cut)  # the clean copy of position i - 1 (>= cut when i - 1 >= cut)
    clean_prev = torch.where(noisy_answer - 1 < cut, noisy_answer - 1, clean_prev)
    return BlockDiffusionBatch(input_ids, pos.expand(b, -1), pair, masked, p_mask, answer_blocks, noisy_answer,
                               clean_prev, block_size)
