"""Small checkpoints in the exact real LLaDA / Dream formats: config schema, tensor names, tokenizer files.

Used for tests (random weights, :func:`make_random_checkpoint`) and by the trained embedded model
(:mod:`dllm_bench.tiny`), so that both go through the same :func:`~dllm_bench.models.load_model` path as an 8B
checkpoint, and any third-party LLaDA/Dream implementation can read them.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import torch

from .config import ModelConfig
from .network import DiffusionLM

# The real LLaDA-8B-Instruct config.json key set (OLMo-style); sizes and ids are filled in per checkpoint.
_LLADA_TEMPLATE: dict[str, Any] = {
    "activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0, "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
    "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM",
                 "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM"},
    "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama", "embedding_dropout": 0.0,
    "flash_attention": False, "include_bias": False, "include_qkv_bias": False, "init_cutoff_factor": None,
    "init_device": "meta", "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": False,
    "layer_norm_type": "rms", "layer_norm_with_affine": True, "model_type": "llada", "multi_query_attention": None,
    "precision": "amp_bf16", "residual_dropout": 0.0, "rope": True, "rope_full_precision": True,
    "scale_logits": False, "torch_dtype": "float32", "use_cache": False, "weight_tying": False,
}
_DREAM_TEMPLATE: dict[str, Any] = {
    "architectures": ["DreamModel"], "model_type": "Dream",
    "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
    "hidden_act": "silu", "rope_scaling": None, "tie_word_embeddings": False, "use_cache": False,
    "use_sliding_window": False, "sliding_window": None, "max_window_layers": 0, "attention_dropout": 0.0,
    "initializer_range": 0.02, "torch_dtype": "float32",
}

LLADA_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' "
    "+ message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
)
DREAM_CHAT_TEMPLATE = (
    "{%- for message in messages %}{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
# special tokens with the real checkpoints' strings; ids are assigned after the characters
SPECIAL_TOKENS = {
    "llada": {
        "bos": "<|startoftext|>", "eos": "<|endoftext|>", "mask": "<|mdm_mask|>",
        "extra": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    },
    "dream": {"bos": "<|beginoftext|>", "eos": "<|endoftext|>", "mask": "<|mask|>", "extra": ["<|im_start|>", "<|im_end|>"]},
    # block diffusion (tiny_blocks.py): each model's mask string; Qwen's end-of-turn; LLaDA2's role tokens
    "fast_dllm_v2": {"bos": "<|beginoftext|>", "eos": "<|endoftext|>", "mask": "|<MASK>|",
                     "extra": ["<|im_start|>", "<|im_end|>"]},
    "sdar": {"bos": "<|beginoftext|>", "eos": "<|endoftext|>", "mask": "<|MASK|>", "extra": ["<|im_start|>", "<|im_end|>"]},
    "llada2": {"bos": "<|startoftext|>", "eos": "<|endoftext|>", "mask": "<|mask|>",
               "extra": ["<role>", "</role>", "<|role_end|>"]},
}
UNK_TOKEN = "<|unk|>"
DEFAULT_CHARS = string.printable  # digits, letters, punctuation, whitespace


def build_char_tokenizer(chars: str | list[str], flavour: str) -> Any:
    """Character-level fast tokenizer with the flavour's special tokens and chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    sp = SPECIAL_TOKENS[flavour]
    symbols = list(dict.fromkeys(chars))
    specials = [UNK_TOKEN, sp["bos"], sp["eos"], sp["mask"], *sp["extra"]]
    vocab = {tok: i for i, tok in enumerate(symbols + specials)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK_TOKEN))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=sp["bos"],
        eos_token=sp["eos"],
        pad_token=sp["eos"],
        unk_token=UNK_TOKEN,
        mask_token=sp["mask"],
        additional_special_tokens=sp["extra"],
        chat_template=LLADA_CHAT_TEMPLATE if flavour == "llada" else DREAM_CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def hf_config_for(
    flavour: str,
    tokenizer: Any,
    *,
    d_model: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int | None = None,
    mlp_hidden_size: int | None = None,
    rope_theta: float | None = None,
    max_sequence_length: int = 1024,
    instruct: bool = True,
) -> dict[str, Any]:
    """A ``config.json`` dict in the real schema of the flavour, sized as asked, ids from the tokenizer."""
    n_kv_heads = n_kv_heads or n_heads
    mlp = mlp_hidden_size or 4 * d_model
    vocab = -(-len(tokenizer) // 16) * 16  # pad the embedding like LLaDA's embedding_size
    mask_id = tokenizer.mask_token_id
    eos_id = tokenizer.eos_token_id
    if flavour == "llada":
        cfg = dict(_LLADA_TEMPLATE)
        cfg.update(
            d_model=d_model, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, mlp_hidden_size=mlp,
            mlp_ratio=mlp // d_model, embedding_size=vocab, vocab_size=vocab, max_sequence_length=max_sequence_length,
            rope_theta=rope_theta or 500000.0, rms_norm_eps=1e-5, mask_token_id=mask_id, eos_token_id=eos_id,
            pad_token_id=eos_id,
        )
    elif flavour == "dream":
        cfg = dict(_DREAM_TEMPLATE)
        cfg.update(
            hidden_size=d_model, num_hidden_layers=n_layers, num_attention_heads=n_heads,
            num_key_value_heads=n_kv_heads, intermediate_size=mlp, vocab_size=vocab,
            max_position_embeddings=max_sequence_length, rope_theta=rope_theta or 1000000.0, rms_norm_eps=1e-6,
            mask_token_id=mask_id, pad_token_id=eos_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_id,
        )
    else:
        raise ValueError(f"flavour {flavour!r} is not supported; allowed: 'llada', 'dream'")
    cfg["dllm_bench_instruct"] = instruct
    return cfg


def save_checkpoint(model: torch.nn.Module, tokenizer: Any, directory: str | Path, hf_config: dict[str, Any]) -> Path:
    """Write config.json, generation_config.json, model.safetensors (``model.state_dict()``) and the tokenizer files."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    gen = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    (directory / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    save_tokenizer(tokenizer, directory)
    return directory


def save_tokenizer(tokenizer: Any, directory: str | Path) -> None:
    """tokenizer.json + tokenizer_config.json + special_tokens_map.json laid out as the real checkpoints ship them.

    Written by hand rather than by ``save_pretrained`` so the files read the same under older transformers
    (class ``PreTrainedTokenizerFast``, chat template inline) as LLaDA's and Dream's own files do.
    """
    directory = Path(directory)
    tokenizer.backend_tokenizer.save(str(directory / "tokenizer.json"))
    specials = {
        "bos_token": tokenizer.bos_token, "eos_token": tokenizer.eos_token, "pad_token": tokenizer.pad_token,
        "unk_token": tokenizer.unk_token, "mask_token": tokenizer.mask_token,
    }
    extra = [t for t in tokenizer.all_special_tokens if t not in specials.values()]
    decoder = {
        str(i): {"content": t.content, "lstrip": False, "normalized": False, "rstrip": False,
                 "single_word": False, "special": True}
        for i, t in sorted(tokenizer.added_tokens_decoder.items())
    }
    config = {
        "add_bos_token": False, "add_eos_token": False, "added_tokens_decoder": decoder,
        "additional_special_tokens": extra, **specials, "chat_template": tokenizer.chat_template,
        "clean_up_tokenization_spaces": False, "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 1000000000000000019884624838656, "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    (directory / "special_tokens_map.json").write_text(
        json.dumps({**specials, "additional_special_tokens": extra}, indent=2) + "\n"
    )


def make_random_checkpoint(
    directory: str | Path,
    flavour: str,
    seed: int = 0,
    *,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    mlp_hidden_size: int | None = None,
    chars: str = DEFAULT_CHARS,
    instruct: bool = True,
    init_std: float = 0.5,
) -> Path:
    """A random-weight checkpoint in the real format (Dream defaults to grouped-query attention)."""
    if flavour == "dream" and n_kv_heads is None:
        n_kv_heads = max(1, n_heads // 2)
    tokenizer = build_char_tokenizer(chars, flavour)
    cfg = hf_config_for(
        flavour, tokenizer, d_model=d_model, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
        mlp_hidden_size=mlp_hidden_size, instruct=instruct,
    )
    model = DiffusionLM(ModelConfig.from_hf_config(cfg))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:  # large enough that confidences vary across positions and steps
                p.copy_(torch.randn(p.shape, generator=gen) * init_std / p.shape[-1] ** 0.5)
    return save_checkpoint(model, tokenizer, directory, cfg)
