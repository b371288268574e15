"""Independent references of the published caches, written from upstream_semantics §3 for the tests.

Nothing here calls ``dllm_bench.models.cache`` or the network's layer pieces: the network's weights are read
once and every layer is recomputed with plain tensor algebra, one prompt (batch 1, no padding) at a time,
following the published control flow (prompt and response caches kept as separate tensors, concatenated
where the hook concatenates them).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


class PlainNetwork:
    """The LLaDA / Dream bidirectional transformer re-implemented from its weights (batch 1)."""

    def __init__(self, model, scale: float = 1.0):
        cfg = model.config
        self.scale = scale  # logits multiplier (the engine tests sharpen the random networks' logits)
        self.mask_id = cfg.mask_token_id
        self.heads, self.kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.eps, self.theta, self.shift = cfg.rms_norm_eps, cfg.rope_theta, bool(cfg.shift_logits)
        self.embed = model.embed.weight.detach()
        self.final_norm = model.norm.weight.detach()
        self.head = model.lm_head.weight.detach()
        self.layers = []
        for block in model.layers:
            def bias(lin):
                return None if lin.bias is None else lin.bias.detach()
            self.layers.append({
                "attn_norm": block.attn_norm.weight.detach(), "ffn_norm": block.ffn_norm.weight.detach(),
                "wq": block.q_proj.weight.detach(), "bq": bias(block.q_proj),
                "wk": block.k_proj.weight.detach(), "bk": bias(block.k_proj),
                "wv": block.v_proj.weight.detach(), "bv": bias(block.v_proj),
                "wo": block.o_proj.weight.detach(), "wg": block.gate_proj.weight.detach(),
                "wu": block.up_proj.weight.detach(), "wd": block.down_proj.weight.detach(),
            })

    # ------------------------------------------------------------ pieces of one layer (x: [T, d])

    def rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    @staticmethod
    def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return x @ w.T + (0 if b is None else b)

    def project(self, L: dict, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v [T, heads * head_dim] of the residual stream x (K before RoPE, as the caches keep it)."""
        xn = self.rms(x, L["attn_norm"])
        return self.linear(xn, L["wq"], L["bq"]), self.linear(xn, L["wk"], L["bk"]), self.linear(xn, L["wv"], L["bv"])

    def value(self, L: dict, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.rms(x, L["attn_norm"]), L["wv"], L["bv"])

    def rotate(self, x: torch.Tensor, positions: torch.Tensor, heads: int) -> torch.Tensor:
        """RoPE on x [T, heads * D] at integer positions [T]; returns [heads, T, D]."""
        d = self.head_dim
        x = x.view(-1, heads, d).transpose(0, 1)
        inv = 1.0 / (self.theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = positions.float()[:, None] * inv[None]
        cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
        half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
        return x * cos + half * sin

    def attention(self, L: dict, q: torch.Tensor, q_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Output projection of softmax attention of queries q [n, .] at q_pos over keys k, v [S, .] at 0..S-1."""
        qh = self.rotate(q, q_pos, self.heads)
        kh = self.rotate(k, torch.arange(k.shape[0]), self.kv_heads)
        vh = v.view(-1, self.kv_heads, self.head_dim).transpose(0, 1)
        group = self.heads // self.kv_heads
        kh, vh = kh.repeat_interleave(group, 0), vh.repeat_interleave(group, 0)
        weights = torch.softmax(qh @ kh.transpose(1, 2) / math.sqrt(self.head_dim), dim=-1)
        out = (weights @ vh).transpose(0, 1).reshape(q.shape[0], -1)
        return out @ L["wo"].T

    def mlp(self, L: dict, x: torch.Tensor) -> torch.Tensor:
        xn = self.rms(x, L["ffn_norm"])
        return (F.silu(xn @ L["wg"].T) * (xn @ L["wu"].T)) @ L["wd"].T

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Logits [T, V] from final hidden states [T, d]; Dream's position i from state i-1 (0 from itself)."""
        if self.shift:
            h = torch.cat([h[:1], h[:-1]])
        return (self.rms(h, self.final_norm) @ self.head.T) * self.scale

    def full(self, ids: torch.Tensor) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Uncached forward of ids [S]: logits [S, V] and every layer's (K, V) [S, .]."""
        h = self.embed[ids]
        kv = []
        pos = torch.arange(ids.shape[0])
        for L in self.layers:
            q, k, v = self.project(L, h)
            kv.append((k, v))
            h = h + self.attention(L, q, pos, k, v)
            h = h + self.mlp(L, h)
        return self.logits(h), kv


class PlainDLLMCache:
    """dLLM-Cache as upstream_semantics §3 states it, for one prompt of length P.

    Step counter = 1-based forward count; prompt refreshed when (step-1) % K_p == 0, response when
    (step-1) % K_r == 0; layer 0 always refreshes both when ``layer0_always``. V-verify (0 < rho <= 1) on every
    step that does not refresh the response: fresh response V replaces the cached V, then the int(R rho) least
    similar tokens (float64 cosine rounded to float32, ties to the lower position: this harness's rule, not the
    published ``torch.topk``) get q, k, attention and FFN recomputed (with the prompt on a prompt-refresh step). A forward
    over a shorter canvas (SlowFast's truncation) uses and updates only the first S - P response slots.
    """

    def __init__(self, net: PlainNetwork, P: int, Kp: int, Kr: int, rho: float, layer0_always: bool = True):
        self.net, self.P, self.Kp, self.Kr, self.rho, self.layer0 = net, P, Kp, Kr, rho, layer0_always
        self.step = 0
        self.prompt: list[dict] = [{} for _ in net.layers]  # k, v, attn, mlp of the prompt
        self.response: list[dict] = [{} for _ in net.layers]  # the same for the response slots
        self.plans: list[tuple[bool, bool, int]] = []  # per forward: refreshed prompt, response, verified count

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [S, V] for the canvas ids [S] (S may be shorter than the first forward's canvas)."""
        self.step += 1
        refresh_prompt = (self.step - 1) % self.Kp == 0
        refresh_response = (self.step - 1) % self.Kr == 0
        R = ids.shape[0] - self.P
        verify = 0 < self.rho <= 1 and not refresh_response
        self.plans.append((refresh_prompt, refresh_response, int(R * self.rho) if verify else 0))
        h = self.net.embed[ids]
        for i, L in enumerate(self.net.layers):
            always = i == 0 and self.layer0
            h = self._layer(L, self.prompt[i], self.response[i], h, refresh_prompt or always,
                            refresh_response or always)
        return self.net.logits(h)

    def _layer(self, L: dict, cp: dict, cr: dict, x: torch.Tensor, rp: bool, rr: bool) -> torch.Tensor:
        net, P = self.net, self.P
        S = x.shape[0]
        R = S - P
        # the response slots this forward sees (all of them unless the canvas is cut)
        work = {name: t[:R].clone() for name, t in cr.items()}
        selected = None
        if rp and rr:
            q, k, v = net.project(L, x)
            cp["k"], cp["v"], work["k"], work["v"] = k[:P], v[:P], k[P:], v[P:]
            att = net.attention(L, q, torch.arange(S), k, v)
            cp["attn"], work["attn"] = att[:P], att[P:]
        elif rr:
            q, k, v = net.project(L, x[P:])
            work["k"], work["v"] = k, v
            work["attn"] = net.attention(L, q, torch.arange(P, S), torch.cat([cp["k"], k]), torch.cat([cp["v"], v]))
        else:
            queries, positions = [], []
            if rp:
                q_p, k_p, v_p = net.project(L, x[:P])
                cp["k"], cp["v"] = k_p, v_p
                queries.append(q_p)
                positions.append(torch.arange(P))
            if 0 < self.rho <= 1:
                v_new = net.value(L, x[P:])
                # float64 similarity rounded to float32, lowest first, ties by position (issue 31)
                sim = F.cosine_similarity(v_new.double(), work["v"].double(), dim=-1).float().tolist()
                ranked = sorted(range(R), key=lambda j: (sim[j], j))
                selected = torch.tensor(sorted(ranked[: int(R * self.rho)]), dtype=torch.long)
                work["v"] = v_new  # the whole response V first ...
                q_s, k_s, _ = net.project(L, x[P:][selected])
                work["k"][selected] = k_s  # ... then the selected tokens' K
                queries.append(q_s)
                positions.append(P + selected)
            if queries:
                att = net.attention(L, torch.cat(queries), torch.cat(positions), torch.cat([cp["k"], work["k"]]),
                                    torch.cat([cp["v"], work["v"]]))
                if rp:
                    cp["attn"] = att[:P]
                if selected is not None:
                    work["attn"][selected] = att[P if rp else 0:]
        x = x + torch.cat([cp["attn"], work["attn"]])
        if rp and rr:
            m = net.mlp(L, x)
            cp["mlp"], work["mlp"] = m[:P], m[P:]
        elif rr:
            work["mlp"] = net.mlp(L, x[P:])
        else:
            if rp:
                cp["mlp"] = net.mlp(L, x[:P])
            if selected is not None:
                work["mlp"][selected] = net.mlp(L, x[P:][selected])
        for name, t in work.items():
            if name not in cr or cr[name].shape[0] == R:
                cr[name] = t
            else:
                cr[name] = torch.cat([t, cr[name][R:]])
        return x + torch.cat([cp["mlp"], work["mlp"]])


class PlainKVCache:
    """Fast-dLLM prefix / dual cache for one prompt: a full forward stores every layer's K (before RoPE) and V;
    a cached step recomputes only its queries and writes their K/V in place (``dual``) or keeps the stored
    prefix [0, start) and uses fresh K/V from start on (``prefix``). Dream's extra query at start - 1 reads
    the stored K/V there and never writes them."""

    def __init__(self, net: PlainNetwork, dual: bool):
        self.net, self.dual = net, dual
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []

    def refresh(self, ids: torch.Tensor) -> torch.Tensor:
        logits, self.kv = self.net.full(ids)
        return logits

    def step(self, ids: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Logits [end - start, V] of canvas positions [start, end) (end = canvas end for prefix)."""
        net = self.net
        lo = start - 1 if net.shift else start
        h = net.embed[ids[lo:end]]
        pos = torch.arange(lo, end)
        for i, L in enumerate(net.layers):
            q, k, v = net.project(L, h)
            k_all, v_all = self.kv[i]
            k_all, v_all = k_all.clone(), v_all.clone()
            fresh = slice(start - lo, None)  # Dream's start - 1 keeps the stored K/V
            k_all[start:end], v_all[start:end] = k[fresh], v[fresh]
            if self.dual:
                self.kv[i] = (k_all, v_all)
            else:
                k_all, v_all = k_all[:end], v_all[:end]
            h = h + net.attention(L, q, pos, k_all, v_all)
            h = h + net.mlp(L, h)
        logits = (net.rms(h, net.final_norm) @ net.head.T) * net.scale
        if net.shift:
            return logits[:-1]  # position i from state i - 1
        return logits
