"""LLaDA-V: the LLaDA language model reading images through a SigLIP tower and a 2-layer GELU MLP projector.

The layout is LLaVA-OneVision's, as ``GSAI-ML/LLaDA-V`` ships it (``model_type: llava_llada``):

- vision tower: SigLIP so400m-patch14-384, run up to the layer ``mm_vision_select_layer`` (-2: every layer
  but the last), patch features of that layer without the post-norm or pooling head; 27 x 27 = 729 per tile;
- projector ``mm_projector``: Linear(1152 -> d) - GELU - Linear(d -> d) (``mlp2x_gelu``);
- image features: overview tile, then the any-resolution grid cropped to the image and shrunk to about 4 tiles
  (``anyres_max_4``, ``spatial_unpad``), one learned ``image_newline`` embedding closing every feature row
  (:mod:`dllm_bench.models.image_processing` does the pixel side and the shape arithmetic);
- the language model: LLaDA-8B with LLaMA-style tensor names (:class:`~dllm_bench.models.DiffusionLM`).

Images enter the language model as embeddings: the prompt's ``<image>`` placeholder is expanded to as many
positions as the image has embeddings, and ``image_where`` / ``image_embeds`` over the whole canvas are passed
on every forward (:meth:`LLaDAV.build_inputs` makes them once per batch; the vision tower runs once per
sample), which the language model applies as its ``embed_override``. To the decoding engine this is one more
model whose ``model_kwargs`` carry the images.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from .config import ModelConfig, ModelConfigError
from .image_processing import (
    AnyResConfig,
    ProcessedImage,
    image_token_count,
    preprocess_image,
    shrunk_size,
    unpad_bounds,
)
from .network import DiffusionLM

IMAGE_TOKEN = "<image>"  # the placeholder text in prompts, as in LLaVA
IMAGE_PLACEHOLDER_ID = -200  # LLaVA's IMAGE_TOKEN_INDEX: where one image goes in a prompt's token ids
MODEL_TYPE = "llava_llada"
# Never committed at masked positions in the Fast-dLLM++ LLaDA-V runs: ids 126080, 126081, 126346, 126347
FORBIDDEN_TOKENS = ("<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>")

# SigLIP so400m-patch14-384 (google/siglip-so400m-patch14-384, and siglip2 of the same name), as LLaVA-OneVision's
# SigLipVisionTower hard-codes it; a checkpoint's ``vision_config`` overrides these keys.
SIGLIP_SO400M_384 = {
    "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_channels": 3, "image_size": 384, "patch_size": 14, "hidden_act": "gelu_pytorch_tanh",
    "layer_norm_eps": 1e-6, "attention_dropout": 0.0,
}

# checkpoint tensor-name prefixes (LlavaLLaDAModelLM) -> this module's parameter prefixes
VISION_PREFIX = "model.vision_tower.vision_tower.vision_model."
PROJECTOR_PREFIX = "model.mm_projector."
NEWLINE_NAME = "model.image_newline"
_LM_PREFIX = "language_model."
_TOWER_PREFIX = "vision_tower."


@dataclass(frozen=True)
class VisionSettings:
    """The vision side of a LLaDA-V ``config.json``: tower sizes, selected layer, projector, image tiling."""

    tower: dict[str, Any]
    select_layer: int = -2
    projector_type: str = "mlp2x_gelu"
    anyres: AnyResConfig = field(default_factory=lambda: AnyResConfig(aspect_ratio="square"))

    def __post_init__(self) -> None:
        n = self.tower["num_hidden_layers"]
        if not 1 <= self.layers_used <= n:
            raise ModelConfigError(
                f"mm_vision_select_layer {self.select_layer} selects no layer of a {n}-layer vision tower; "
                f"allowed: -{n} .. -1 or 1 .. {n}"
            )
        if not re.fullmatch(r"linear|mlp\d+x_gelu", self.projector_type):
            raise ModelConfigError(f"mm_projector_type {self.projector_type!r} is not supported; allowed: linear, mlp<N>x_gelu")
        if self.anyres.tile_size != self.tower["image_size"]:
            raise ModelConfigError(f"image tiles of {self.anyres.tile_size} px do not fit a {self.tower['image_size']} px tower")

    @property
    def layers_used(self) -> int:
        """Encoder layers that run: hidden state ``select_layer`` (0 = embeddings) of the L + 1 states."""
        n = self.tower["num_hidden_layers"]
        return self.select_layer + n + 1 if self.select_layer < 0 else self.select_layer

    @property
    def hidden_size(self) -> int:
        return int(self.tower["hidden_size"])

    @classmethod
    def from_hf_config(cls, raw: dict[str, Any]) -> VisionSettings:
        tower = {**SIGLIP_SO400M_384, **(raw.get("vision_config") or {})}
        tower = {k: tower[k] for k in SIGLIP_SO400M_384}
        mm_hidden = raw.get("mm_hidden_size")
        if mm_hidden is not None and int(mm_hidden) != tower["hidden_size"]:
            raise ModelConfigError(f"mm_hidden_size {mm_hidden} differs from the vision tower's hidden_size {tower['hidden_size']}")
        return cls(
            tower=tower,
            select_layer=int(raw.get("mm_vision_select_layer", -2)),
            projector_type=str(raw.get("mm_projector_type", "mlp2x_gelu")),
            anyres=AnyResConfig.from_model_config(raw, tile_size=tower["image_size"], patch_size=tower["patch_size"]),
        )


def language_config(raw: dict[str, Any], name_or_path: str = "") -> ModelConfig:
    """The language model's :class:`ModelConfig` from a LLaDA-V ``config.json`` (LLaMA-style LLaDA keys).

    LLaDA-V's file lacks ``mask_token_id`` (:class:`ModelConfig` knows LLaDA's 126336 from the vocabulary size)
    and carries LLaMA-3's ``bos_token_id`` 128000, outside LLaDA's vocabulary; such a value is dropped so the
    tokenizer's ``<|startoftext|>`` is used.
    """
    if raw.get("model_type") not in (MODEL_TYPE, "llada"):
        raise ModelConfigError(f"config.json of {name_or_path or '<config>'} has model_type {raw.get('model_type')!r}; expected {MODEL_TYPE!r}")
    cfg = {**raw, "model_type": "llada"}
    bos = cfg.get("bos_token_id")
    if bos is not None and not 0 <= int(bos) < int(cfg.get("vocab_size", 0)):
        cfg.pop("bos_token_id")
    cfg.setdefault("dllm_bench_instruct", True)  # LLaDA-V is instruction-tuned: prompts use the chat template
    return ModelConfig.from_hf_config(cfg, name_or_path=name_or_path)


def forbidden_token_ids(tokenizer: Any) -> tuple[int, ...]:
    """Ids of :data:`FORBIDDEN_TOKENS` in this tokenizer (126080, 126081, 126346, 126347 for LLaDA's)."""
    from .checkpoint import token_ids

    return token_ids(tokenizer, FORBIDDEN_TOKENS, f"LLaDA-V's forbidden tokens {FORBIDDEN_TOKENS}")


USER_TURN = "<|start_header_id|>user<|end_header_id|>\n\n"  # LLaDA's chat template opens a user turn so


def add_image_placeholders(text: str, n_images: int) -> str:
    """``<image>`` placeholders at the start of the (first user turn of the) text, as LLaVA's evaluation adds them.

    lmms-eval writes ``"<image>\n" + question`` (n placeholders joined by spaces) when a question has none;
    in an already chat-templated prompt they go right after the first user header. A text that already holds
    ``<image>`` is kept as is.
    """
    if n_images < 0:
        raise ValueError(f"n_images={n_images}: expected >= 0")
    if n_images == 0 or IMAGE_TOKEN in text:
        return text
    tags = " ".join([IMAGE_TOKEN] * n_images) + "\n"
    at = text.find(USER_TURN)
    if at < 0:
        return tags + text
    at += len(USER_TURN)
    return text[:at] + tags + text[at:]


class SiglipTower(nn.Module):
    """SigLIP vision encoder (transformers' own embedding and encoder classes) up to the selected layer."""

    def __init__(self, settings: VisionSettings) -> None:
        super().__init__()
        from transformers import SiglipVisionConfig
        from transformers.models.siglip.modeling_siglip import SiglipEncoder, SiglipVisionEmbeddings

        cfg = SiglipVisionConfig(**{**settings.tower, "num_hidden_layers": settings.layers_used})
        cfg._attn_implementation = "sdpa"
        self.config = cfg
        self.embeddings = SiglipVisionEmbeddings(cfg)
        self.encoder = SiglipEncoder(cfg)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[N, 3, S, S] tiles -> [N, (S // patch)^2, hidden] features of the selected layer."""
        return self.encoder(inputs_embeds=self.embeddings(pixel_values)).last_hidden_state

    def reset_position_ids(self, device: torch.device) -> None:
        """Rebuild the non-persistent position-id buffer (it stays on ``meta`` after an ``assign`` load)."""
        n = self.embeddings.num_positions
        self.embeddings.position_ids = torch.arange(n, device=device).expand(1, -1)


def build_projector(kind: str, vision_hidden: int, d_model: int) -> nn.Sequential:
    """``linear`` or ``mlp<N>x_gelu`` (Linear, then N-1 times GELU + Linear), indices as in the checkpoint."""
    if kind == "linear":
        return nn.Sequential(nn.Linear(vision_hidden, d_model))
    depth = int(re.fullmatch(r"mlp(\d+)x_gelu", kind).group(1))  # type: ignore[union-attr]
    layers: list[nn.Module] = [nn.Linear(vision_hidden, d_model)]
    for _ in range(depth - 1):
        layers += [nn.GELU(), nn.Linear(d_model, d_model)]
    return nn.Sequential(*layers)


@dataclass
class MultimodalBatch:
    """Decoder inputs for a batch of prompts with images.

    input_ids / attention_mask: [B, P], left-padded with the pad id. Image positions count as real tokens and
    hold the BOS id (any id would do, the embedding is replaced; BOS is neither a stop token nor the mask).
    model_kwargs: ``{"image_where": [B, P + G] bool, "image_embeds": [B, P + G, d]}`` for every forward over
    the canvas of P + G positions (empty when no row has an image). image_tokens: embeddings per image, per row.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    model_kwargs: dict[str, Any]
    image_tokens: list[list[int]]


class LLaDAV(nn.Module):
    """LLaDA-V: :class:`DiffusionLM` plus vision tower, projector and image newline; checkpoint tensor names."""

    accepts_images = True
    accepts_logits_range = True  # passed through to the language model
    accepts_logits_at = True

    def __init__(self, config: ModelConfig, vision: VisionSettings) -> None:
        super().__init__()
        self.vision = vision
        self.language_model = DiffusionLM(config)
        self.vision_tower = SiglipTower(vision)
        self.mm_projector = build_projector(vision.projector_type, vision.hidden_size, config.d_model)
        self.image_newline = nn.Parameter(torch.zeros(config.d_model)) if "unpad" in vision.anyres.merge_type else None
        self.tokenizer: Any = None
        self._register_state_dict_hook(_to_checkpoint_names)
        self._register_load_state_dict_pre_hook(_from_checkpoint_names, with_module=True)

    @property
    def config(self) -> ModelConfig:
        return self.language_model.config

    @property
    def device(self) -> torch.device:
        return self.language_model.device

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.dtype

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        image_where: torch.Tensor | None = None,
        image_embeds: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """The language model's forward with image embeddings spliced in (other arguments as :class:`DiffusionLM`).

        image_where [B, S] bool / image_embeds [B, S, d] cover the whole canvas (from :meth:`build_inputs`); two
        plain tensors rather than a tuple so the decoding engine can take batch rows of them like any kwarg.
        """
        if (image_where is None) != (image_embeds is None):
            raise ValueError("give image_where and image_embeds together (both from build_inputs) or neither")
        override = None if image_where is None else (image_where, image_embeds)
        return self.language_model(input_ids, attention_mask, embed_override=override, **kwargs)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ---- images -> embeddings -------------------------------------------------------------------------------

    def preprocess(self, image: Image.Image) -> ProcessedImage:
        """Pixel tiles for one image with this checkpoint's tiling settings."""
        return preprocess_image(image, self.vision.anyres)

    @torch.no_grad()
    def image_embeddings(self, images: Sequence[ProcessedImage], tiles_per_batch: int = 64) -> list[torch.Tensor]:
        """Language-model input embeddings [n_i, d] per image (tower batched over all tiles, then merged)."""
        if not images:
            return []
        pixels = torch.cat([p.pixel_values for p in images]).to(self.device, self.dtype)
        feats = torch.cat([
            self.mm_projector(self.vision_tower(pixels[i : i + tiles_per_batch]))
            for i in range(0, pixels.shape[0], tiles_per_batch)
        ])
        per_image = feats.split([p.num_tiles for p in images])
        return [self.merge_tiles(f, p) for f, p in zip(per_image, images)]

    def merge_tiles(self, feats: torch.Tensor, image: ProcessedImage) -> torch.Tensor:
        """One image's projected tile features [tiles, unit^2, d] -> its embedding sequence [n, d].

        Overview tile first; then the grid as one feature map, cropped to the image (unpad), bilinearly shrunk
        to about ``max_tiles`` tiles (anyres_max), each row closed by ``image_newline``.
        """
        cfg = self.vision.anyres
        if not cfg.is_anyres or cfg.merge_type == "flat":
            return feats.flatten(0, 1)
        unit, d = cfg.features_per_side, feats.shape[-1]
        cols, rows = image.grid
        grid = feats[1:].view(rows, cols, unit, unit, d).permute(4, 0, 2, 1, 3).reshape(d, rows * unit, cols * unit)
        top, bottom, left, right = unpad_bounds(rows * unit, cols * unit, image.image_size)
        grid = grid[:, top:bottom, left:right]
        size = shrunk_size(grid.shape[1], grid.shape[2], unit, cfg.max_tiles)
        if size is not None:
            grid = F.interpolate(grid[None], size=list(size), mode="bilinear")[0]
        newline = self.image_newline.to(grid.dtype)[:, None, None].expand(d, grid.shape[1], 1)
        grid = torch.cat([grid, newline], dim=2)  # [d, h, w + 1]
        return torch.cat([feats[0], grid.flatten(1).transpose(0, 1)])

    # ---- prompts with images -> decoder inputs --------------------------------------------------------------

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a rendered prompt, each ``<image>`` becoming one :data:`IMAGE_PLACEHOLDER_ID`.

        Pieces between placeholders are tokenized separately without special tokens, as LLaVA's
        ``tokenizer_image_token`` does (LLaDA's tokenizer adds no BOS; the chat template writes it).
        """
        if self.tokenizer is None:
            raise RuntimeError("this LLaDA-V has no tokenizer (loaded on meta without tokenizer files?)")
        ids: list[int] = []
        for i, piece in enumerate(text.split(IMAGE_TOKEN)):
            if i:
                ids.append(IMAGE_PLACEHOLDER_ID)
            ids.extend(self.tokenizer.encode(piece, add_special_tokens=False))
        return ids

    def image_token_count(self, image: Image.Image) -> int:
        """Embeddings one image contributes (without running the tower)."""
        return image_token_count(image.size, self.vision.anyres)

    def build_inputs(
        self,
        prompts: Sequence[str | Sequence[int]],
        images: Sequence[Sequence[Image.Image]],
        gen_length: int,
        add_placeholders: bool = True,
    ) -> MultimodalBatch:
        """Left-padded decoder inputs with every ``<image>`` expanded and the image embeddings ready.

        ``prompts``: rendered prompt texts (or ids from :meth:`encode_prompt`); ``images[i]``: row i's images,
        one per placeholder, in order. A text prompt with images but no ``<image>`` gets them at the start of
        its user turn (:func:`add_image_placeholders`) unless ``add_placeholders`` is false. The vision tower
        runs once here; the result serves every forward.
        """
        if len(prompts) != len(images):
            raise ValueError(f"{len(prompts)} prompts but {len(images)} image lists; give one list per prompt")
        if not isinstance(gen_length, int) or gen_length < 0:
            raise ValueError(f"gen_length={gen_length!r}: expected a non-negative int")
        if add_placeholders:
            prompts = [add_image_placeholders(p, len(im)) if isinstance(p, str) else p for p, im in zip(prompts, images)]
        id_rows = [self.encode_prompt(p) if isinstance(p, str) else list(p) for p in prompts]
        for i, (ids, imgs) in enumerate(zip(id_rows, images)):
            n_slots = ids.count(IMAGE_PLACEHOLDER_ID)
            if n_slots != len(imgs):
                raise ValueError(
                    f"prompt {i} has {n_slots} {IMAGE_TOKEN!r} placeholder(s) but {len(imgs)} image(s) were given; "
                    "each image needs one placeholder"
                )
        processed = [[self.preprocess(im) for im in imgs] for imgs in images]
        flat = [p for row in processed for p in row]
        embeds_flat = self.image_embeddings(flat)
        counts = [e.shape[0] for e in embeds_flat]
        expected = [image_token_count(p.image_size, self.vision.anyres) for p in flat]
        if counts != expected:  # the merge and the arithmetic must agree, or positions would be misplaced
            raise RuntimeError(f"image embedding counts {counts} differ from the predicted {expected}")

        pad = self.config.pad_token_id
        fill = self.config.bos_token_id if self.config.bos_token_id is not None else pad
        rows: list[list[int]] = []
        image_rows: list[list[tuple[int, torch.Tensor]]] = []  # per row: (start offset in the row, embeds)
        cursor = 0
        for ids in id_rows:
            row, placed = [], []
            for tok in ids:
                if tok == IMAGE_PLACEHOLDER_ID:
                    e = embeds_flat[cursor]
                    cursor += 1
                    placed.append((len(row), e))
                    row.extend([fill] * e.shape[0])
                else:
                    row.append(tok)
            rows.append(row)
            image_rows.append(placed)

        b, p_len = len(rows), max((len(r) for r in rows), default=0)
        input_ids = torch.full((b, p_len), pad, dtype=torch.long)
        attention_mask = torch.zeros((b, p_len), dtype=torch.long)
        for i, row in enumerate(rows):
            if row:
                input_ids[i, p_len - len(row) :] = torch.tensor(row, dtype=torch.long)
                attention_mask[i, p_len - len(row) :] = 1
        model_kwargs: dict[str, Any] = {}
        if flat:
            s = p_len + gen_length
            where = torch.zeros((b, s), dtype=torch.bool, device=self.device)
            embeds = torch.zeros((b, s, self.config.d_model), dtype=self.dtype, device=self.device)
            for i, (row, placed) in enumerate(zip(rows, image_rows)):
                offset = p_len - len(row)
                for start, e in placed:
                    where[i, offset + start : offset + start + e.shape[0]] = True
                    embeds[i, offset + start : offset + start + e.shape[0]] = e
            model_kwargs = {"image_where": where, "image_embeds": embeds}
        per_row, k = [], 0
        for imgs in images:
            per_row.append(counts[k : k + len(imgs)])
            k += len(imgs)
        return MultimodalBatch(input_ids.to(self.device), attention_mask.to(self.device), model_kwargs, per_row)


# ---- checkpoint names ---------------------------------------------------------------------------------------


def _to_checkpoint_names(module: LLaDAV, state_dict: dict, prefix: str, local_metadata: Any) -> dict:
    for key in list(state_dict):
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix) :]
        if rest.startswith(_LM_PREFIX):
            new = rest[len(_LM_PREFIX) :]  # the language model already wrote its checkpoint names
        elif rest.startswith(_TOWER_PREFIX):
            new = VISION_PREFIX + rest[len(_TOWER_PREFIX) :]
        elif rest.startswith("mm_projector."):
            new = PROJECTOR_PREFIX + rest[len("mm_projector.") :]
        elif rest == "image_newline":
            new = NEWLINE_NAME
        else:
            continue
        state_dict[prefix + new] = state_dict.pop(key)
    return state_dict


def _from_checkpoint_names(module: LLaDAV, state_dict: dict, prefix: str, *args: Any) -> None:
    for key in list(state_dict):
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix) :]
        if rest.startswith(VISION_PREFIX):
            new = _TOWER_PREFIX + rest[len(VISION_PREFIX) :]
        elif rest.startswith(PROJECTOR_PREFIX):
            new = "mm_projector." + rest[len(PROJECTOR_PREFIX) :]
        elif rest == NEWLINE_NAME:
            new = "image_newline"
        elif rest.startswith(("model.", "lm_head.")):
            new = _LM_PREFIX + rest
        else:
            continue
        state_dict[prefix + new] = state_dict.pop(key)


def unused_vision_tensor(name: str, settings: VisionSettings) -> bool:
    """Tensors a LLaDA-V checkpoint may carry that never run: SigLIP's post-norm, pooling head, later layers."""
    if not name.startswith(VISION_PREFIX):
        return False
    rest = name[len(VISION_PREFIX) :]
    if rest.startswith(("post_layernorm.", "head.")):
        return True
    m = re.match(r"encoder\.layers\.(\d+)\.", rest)
    return bool(m) and int(m.group(1)) >= settings.layers_used


# ---- loading ------------------------------------------------------------------------------------------------


def load_llada_v(
    directory: str | Path,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    *,
    instruct: bool | None = None,
    rope_full_precision: bool | None = None,
) -> LLaDAV:
    """Build LLaDA-V from a local checkpoint directory (``config.json`` + safetensors + tokenizer files).

    ``device="meta"`` builds the architecture only; ``rope_full_precision`` as in
    :func:`~dllm_bench.models.loading.load_model`. Tensor names and shapes are checked from the safetensors
    headers before any weight is read.
    """
    from .checkpoint import (
        _fill_special_ids,
        _read_tensors,
        checkpoint_tensors,
        load_tokenizer,
        read_config,
        resolve_device_dtype,
        validate_tensors,
    )

    directory = Path(directory)
    raw = read_config(directory)
    device, dtype = resolve_device_dtype(device, dtype)
    config = language_config(raw, name_or_path=str(directory))
    if instruct is not None:
        config.is_instruct = instruct
    if rope_full_precision is not None:
        config.rope_full_precision = bool(rope_full_precision)
    vision = VisionSettings.from_hf_config(raw)
    found = None if device.type == "meta" else checkpoint_tensors(directory)
    with torch.device("meta"):
        model = LLaDAV(config, vision)
    model.tokenizer = load_tokenizer(directory)
    model.language_model.tokenizer = model.tokenizer
    _fill_special_ids(config, model.tokenizer)
    if found is None:
        return model.to(dtype)
    used = {k: v for k, v in found.items() if not unused_vision_tensor(k, vision)}
    validate_tensors(model, used)  # type: ignore[arg-type]
    model.load_state_dict(_read_tensors(used, device, dtype), strict=True, assign=True)
    model.vision_tower.reset_position_ids(device)
    return model.eval()


# ---- tiny random checkpoints in the real format (tests) -----------------------------------------------------


def llada_v_hf_config(
    tokenizer: Any,
    *,
    d_model: int,
    n_layers: int,
    n_heads: int,
    mlp_hidden_size: int,
    vision_config: dict[str, Any] | None = None,
    max_sequence_length: int = 4096,
) -> dict[str, Any]:
    """A LLaDA-V ``config.json`` dict (LLaMA-style LLaDA keys + LLaVA-OneVision keys), sized as asked.

    ``vision_config`` (tower sizes) is this project's extension for small towers; without it the published
    SigLIP so400m-patch14-384 is meant, as in the real file.
    """
    vocab = -(-len(tokenizer) // 16) * 16
    tower = {**SIGLIP_SO400M_384, **(vision_config or {})}
    cfg: dict[str, Any] = {
        "architectures": ["LlavaLLaDAModelLM"], "model_type": MODEL_TYPE, "attention_bias": False,
        "attention_dropout": 0.0, "eos_token_id": tokenizer.eos_token_id, "hidden_act": "silu",
        "hidden_size": d_model, "initializer_range": 0.02, "intermediate_size": mlp_hidden_size,
        "max_position_embeddings": max_sequence_length, "num_attention_heads": n_heads,
        "num_hidden_layers": n_layers, "num_key_value_heads": n_heads, "pretraining_tp": 1, "rms_norm_eps": 1e-5,
        "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "float32",
        "use_cache": False, "vocab_size": vocab, "mask_token_id": tokenizer.mask_token_id,
        "pad_token_id": tokenizer.eos_token_id,
        # LLaVA-OneVision keys, with LLaDA-V's published values (train/scripts/llada_v_sft.sh)
        "mm_vision_tower": "google/siglip2-so400m-patch14-384", "mm_hidden_size": tower["hidden_size"],
        "mm_projector_type": "mlp2x_gelu", "mm_vision_select_layer": -2, "mm_vision_select_feature": "patch",
        "mm_patch_merge_type": "spatial_unpad", "image_aspect_ratio": "anyres_max_4",
        "image_grid_pinpoints": [[w * tower["image_size"], h * tower["image_size"]] for w in range(1, 7) for h in range(1, 7)],
        "mm_use_im_start_end": False, "mm_use_im_patch_token": False, "use_mm_proj": True,
        "tokenizer_model_max_length": 8192,
    }
    if vision_config is not None:
        cfg["vision_config"] = dict(vision_config)
    return cfg


def make_random_llada_v_checkpoint(
    directory: str | Path,
    seed: int = 0,
    *,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    mlp_hidden_size: int = 128,
    vision_config: dict[str, Any] | None = None,
    init_std: float = 0.5,
) -> Path:
    """A random-weight LLaDA-V checkpoint in the real format: names, config keys, tokenizer files.

    The default tower is a 2-layer SigLIP on 28 px tiles (2 x 2 patches of 14 px), so a 60 x 40 image costs
    a handful of embeddings.
    """
    from .tiny_format import DEFAULT_CHARS, build_char_tokenizer, save_checkpoint

    vision_config = vision_config or {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
        "image_size": 28, "patch_size": 14,
    }
    tokenizer = build_char_tokenizer(DEFAULT_CHARS, "llada")
    cfg = llada_v_hf_config(
        tokenizer, d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp_hidden_size=mlp_hidden_size,
        vision_config=vision_config,
    )
    model = LLaDAV(language_config(cfg), VisionSettings.from_hf_config(cfg))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(("layer_norm1.weight", "layer_norm2.weight")):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * init_std / p.shape[-1] ** 0.5)
    return save_checkpoint(model, tokenizer, directory, cfg)
