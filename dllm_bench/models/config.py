"""Model configuration: one dataclass for both network flavours, parsed from a checkpoint's ``config.json``.

The flavour comes from ``model_type`` (never from the checkpoint's name); the tensor naming scheme from the
config's key style (LLaDA's OLMo-style keys vs LLaMA/Qwen2-style keys), overridable by the tensors on disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .blocks import ATTENTIONS, BLOCK_GRIDS

FLAVOURS = ("llada", "dream")
TENSOR_NAMINGS = ("olmo", "llama")

# model_type values (as written in real config.json files) -> flavour
MODEL_TYPES = {"llada": "llada", "Dream": "dream", "dream": "dream"}
# mask token of the real vocabularies: (flavour, vocabulary rows) -> id
REAL_MASK_IDS = {("llada", 126464): 126336, ("dream", 152064): 151666,
                 ("llada", 155136): 5}  # iLLaDA: "By setting mask_id=5" (ML-GSAI/LLaDA README @ b7e6c35)


class ModelConfigError(ValueError):
    """A config.json that does not describe a supported network."""


# config.json keys whose other values change the network beyond what DiffusionLM computes: key -> allowed values
UNSUPPORTED_IF_NOT = {
    "rope_scaling": (None,), "use_sliding_window": (None, False),
    "hidden_act": (None, "silu"), "activation_type": (None, "silu"), "alibi": (None, False), "rope": (None, True),
    "attention_layer_norm": (None, False), "clip_qkv": (None,), "input_emb_norm": (None, False),
    "scale_logits": (None, False), "layer_norm_type": (None, "rms"), "block_type": (None, "llama"),
    "partial_rotary_factor": (None, 1, 1.0), "num_experts": (None,),  # a LLaDA-MoE config goes to moe.MoEConfig
}


@dataclass
class ModelConfig:
    """Architecture and special tokens of a LLaDA- or Dream-flavoured bidirectional transformer."""

    flavour: str
    vocab_size: int  # rows of the embedding and LM head (LLaDA: embedding_size, padded)
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    mlp_hidden_size: int
    rope_theta: float
    rms_norm_eps: float
    mask_token_id: int
    eos_token_id: int
    pad_token_id: int
    bos_token_id: int | None = None
    eot_token_id: int | None = None  # end of turn: LLaDA <|eot_id|>, Dream <|im_end|>
    qkv_bias: bool = False
    # rotate q/k in float32 (True) or in the model dtype with cos/sin cast to it (False), as the published model
    # file of the checkpoint does: LLaDA's config key (default True); Dream's, LLaDA-V's and LLaDA-MoE's files: model
    # dtype
    rope_full_precision: bool = True
    tensor_naming: str = "olmo"
    max_sequence_length: int = 4096
    is_instruct: bool = False
    name_or_path: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # block diffusion's three switches (see .blocks): attention topology and block size, block grid, prediction
    # shift (None: as the flavour, Dream's logits at i predict token i+1)
    attention: str = "full"
    block_size: int = 0
    block_grid: str = "absolute"
    predicts_next: bool | None = None
    head_dim_override: int | None = None  # Qwen3 / LLaDA2 configs name head_dim apart from d_model / n_heads
    tie_embeddings: bool = False  # the LM head is the embedding (tie_word_embeddings; the checkpoint has no head)
    eot_token: str | None = None  # end-of-turn token string where the flavour's default is not the vocabulary's

    def __post_init__(self) -> None:
        if self.flavour not in FLAVOURS:
            raise ModelConfigError(f"flavour {self.flavour!r} is not supported; allowed: {FLAVOURS}")
        if self.tensor_naming not in TENSOR_NAMINGS:
            raise ModelConfigError(f"tensor_naming {self.tensor_naming!r} is not supported; allowed: {TENSOR_NAMINGS}")
        if self.head_dim_override is None and self.d_model % self.n_heads:
            raise ModelConfigError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.attention not in ATTENTIONS:
            raise ModelConfigError(f"attention {self.attention!r} is not supported; allowed: {ATTENTIONS}")
        if self.block_grid not in BLOCK_GRIDS:
            raise ModelConfigError(f"block_grid {self.block_grid!r} is not supported; allowed: {BLOCK_GRIDS}")
        if self.attention == "block_causal" and self.block_size <= 0 and self.block_grid != "anchored":
            # an anchored grid may leave it to each forward (D2F: the decoder's block length)
            raise ModelConfigError(f"block-causal attention needs a positive block_size, got {self.block_size}")
        if self.n_heads % self.n_kv_heads:
            raise ModelConfigError(f"n_heads {self.n_heads} is not divisible by n_kv_heads {self.n_kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.d_model // self.n_heads

    @property
    def rotary_dim(self) -> int:
        """Dimensions of each head that RoPE rotates (all, unless a partial rotary factor says fewer)."""
        return self.head_dim

    @property
    def shift_logits(self) -> bool:
        """Dream (and Fast-dLLM v2) predict position i from hidden state i-1; the network shifts so callers never
        see it."""
        return self.flavour == "dream" if self.predicts_next is None else self.predicts_next

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Ids that end an answer (EOS and end-of-turn)."""
        ids = [self.eos_token_id] + ([self.eot_token_id] if self.eot_token_id is not None else [])
        return tuple(dict.fromkeys(ids))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("raw")
        return d

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], name_or_path: str = "") -> ModelConfig:
        """Parse a real ``config.json`` (LLaDA OLMo-style or LLaMA-style keys, or Dream/Qwen2 keys)."""
        model_type = cfg.get("model_type")
        if model_type not in MODEL_TYPES:
            raise ModelConfigError(
                f"config.json of {name_or_path or '<config>'} has model_type {model_type!r}; "
                f"allowed: {sorted(MODEL_TYPES)}"
            )
        flavour = MODEL_TYPES[model_type]
        for key, allowed in UNSUPPORTED_IF_NOT.items():
            if cfg.get(key) not in allowed:
                raise ModelConfigError(
                    f"config.json of {name_or_path or '<config>'} has {key}={cfg[key]!r}, which the {flavour} network "
                    f"does not compute; allowed: {[a for a in allowed if a is not None] or 'null'}"
                )

        olmo = is_olmo_style(cfg)
        style = "LLaDA's OLMo-style keys" if olmo else "LLaMA/Qwen2-style keys"
        if flavour == "dream" and cfg.get("tie_word_embeddings"):  # a tied head is LLaDA-flavoured here (iLLaDA)
            raise ModelConfigError(f"config.json of {name_or_path or '<config>'} has tie_word_embeddings=True, which the "
                                   f"dream network does not compute; allowed: false")

        def need(*keys: str) -> Any:
            for k in keys:
                if cfg.get(k) is not None:
                    return cfg[k]
            raise ModelConfigError(f"config.json of {name_or_path or '<config>'} lacks {' / '.join(keys)} (it is written "
                                   f"in {style})")

        vocab = cfg.get("embedding_size") or cfg.get("vocab_size")
        if cfg.get("mask_token_id") is None and (flavour, vocab) in REAL_MASK_IDS:
            # LLaDA-V's re-keyed language-model config omits it; the real vocabulary fixes it
            cfg = {**cfg, "mask_token_id": REAL_MASK_IDS[(flavour, vocab)]}
        common = dict(
            flavour=flavour,
            rms_norm_eps=float(need("rms_norm_eps")),
            rope_theta=float(need("rope_theta")),
            mask_token_id=int(need("mask_token_id")),
            eos_token_id=int(need("eos_token_id")),
            name_or_path=name_or_path,
            is_instruct=_looks_instruct(cfg, name_or_path),
            raw=dict(cfg),
        )
        common["pad_token_id"] = int(cfg.get("pad_token_id", common["eos_token_id"]))
        if cfg.get("bos_token_id") is not None:
            common["bos_token_id"] = int(cfg["bos_token_id"])
        if olmo:  # LLaDA, OLMo-style keys
            if cfg.get("weight_tying"):
                raise ModelConfigError("weight_tying=true is not a LLaDA checkpoint layout we know; expected false")
            n_heads = int(need("n_heads"))
            return cls(
                vocab_size=int(cfg.get("embedding_size") or need("vocab_size")),
                d_model=int(need("d_model")),
                n_layers=int(need("n_layers")),
                n_heads=n_heads,
                n_kv_heads=int(cfg.get("n_kv_heads") or n_heads),
                mlp_hidden_size=int(need("mlp_hidden_size")),
                qkv_bias=bool(cfg.get("include_qkv_bias") or cfg.get("include_bias")),
                rope_full_precision=bool(cfg.get("rope_full_precision", True)),
                tensor_naming="olmo",
                max_sequence_length=int(cfg.get("max_sequence_length", 4096)),
                **common,
            )
        n_heads = int(need("num_attention_heads"))
        return cls(
            vocab_size=int(need("vocab_size")),
            d_model=int(need("hidden_size")),
            n_layers=int(need("num_hidden_layers")),
            n_heads=n_heads,
            n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
            mlp_hidden_size=int(need("intermediate_size")),
            # Qwen2 (Dream) always has q/k/v biases; LLaMA-style LLaDA says so in attention_bias.
            qkv_bias=True if flavour == "dream" else bool(cfg.get("attention_bias", False)),
            tensor_naming="llama",
            # the Qwen2/LLaMA-style model files (Dream; LLaDA-V's language model) cast cos/sin to the model dtype
            rope_full_precision=bool(cfg.get("rope_full_precision", False)),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),  # iLLaDA-8B ties its head
            max_sequence_length=int(cfg.get("max_position_embeddings", 4096)),
            **common,
        )


# the network's shape keys in each style; a config with any OLMo key and no LLaMA one is OLMo-style, so a removed
# key is named in the style the file is written in
OLMO_KEYS = ("d_model", "n_layers", "n_heads", "mlp_hidden_size", "max_sequence_length", "embedding_size")
LLAMA_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def is_olmo_style(cfg: dict[str, Any]) -> bool:
    """Whether a config.json uses LLaDA's OLMo-style keys (`d_model`, `n_layers`, ...) rather than LLaMA/Qwen2's."""
    if "d_model" in cfg:
        return True
    return any(k in cfg for k in OLMO_KEYS) and not any(k in cfg for k in LLAMA_KEYS)


def _looks_instruct(cfg: dict[str, Any], name_or_path: str) -> bool:
    """Instruct models get the chat template; an explicit ``dllm_bench_instruct`` key wins over the name."""
    if "dllm_bench_instruct" in cfg:
        return bool(cfg["dllm_bench_instruct"])
    name = f"{cfg.get('_name_or_path', '')} {name_or_path}".lower()
    return "instruct" in name
