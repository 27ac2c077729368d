"""Hyper-parameters of a decoder (Llama, Qwen2, Qwen3, Mistral), read from a checkpoint's own metadata.

Nothing here is specific to one model: the GGUF key-value metadata and a Hugging Face
`config.json` are both translated into the same frozen `ModelConfig`, which is hashable so it
can be a static argument of jitted functions.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from engine.errors import ModelFormatError

# Architecture name (GGUF `general.architecture`) -> Hugging Face class; all spell one decoder here.
# Their differences are ModelConfig fields (see FAMILIES), not separate model code. llama.cpp writes
# Mistral checkpoints as `llama` GGUFs, so "mistral" has no GGUF architecture of its own.
SUPPORTED_GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")
SUPPORTED_HF_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM")
_HF_TO_ARCH = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
               "MistralForCausalLM": "mistral"}


@dataclasses.dataclass(frozen=True)
class Family:
    """What sets one architecture apart from Llama, as data the shared decoder reads."""

    attention_bias: bool  # q/k/v projections carry biases (Qwen2)
    gguf_qk_permuted: bool  # llama.cpp's converter permuted Q/K rows for its interleaved rotary (Llama only)
    qk_norm: bool = False  # per-head RMSNorm of q and k (weights [head_dim]) before RoPE (Qwen3)
    # config.json's `sliding_window` bounds every layer's attention (Mistral); the Qwen families gate
    # theirs behind `use_sliding_window` and apply it to some layers only, which is refused instead.
    hf_sliding_window: bool = False


FAMILIES = {
    "llama": Family(attention_bias=False, gguf_qk_permuted=True),
    "qwen2": Family(attention_bias=True, gguf_qk_permuted=False),
    "qwen3": Family(attention_bias=False, gguf_qk_permuted=False, qk_norm=True),
    "mistral": Family(attention_bias=False, gguf_qk_permuted=True, hf_sliding_window=True),
}


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama-3 style frequency scaling (`rope_type: llama3` in config.json)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    rope_scaling: RopeScaling | None = None
    # Per-frequency divisors stored by llama.cpp as the `rope_freqs.weight` tensor (Llama-3.1 GGUFs).
    rope_freq_factors: tuple[float, ...] | None = None
    architecture: str = "llama"  # a key of FAMILIES
    attention_bias: bool = False
    qk_norm: bool = False
    # A query at position p attends to keys at positions > p - sliding_window. None: no window, or one
    # no context can exceed (>= max_position_embeddings, the most any caller may serve), a no-op.
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ModelFormatError(f"sliding window {self.sliding_window} is not a positive number of tokens; "
                                   "the checkpoint metadata is inconsistent.")
        if self.num_heads % self.num_kv_heads:
            raise ModelFormatError(
                f"{self.num_heads} attention heads are not a multiple of {self.num_kv_heads} KV heads; "
                "the checkpoint metadata is inconsistent."
            )
        if self.head_dim % 2:
            raise ModelFormatError(f"head dimension {self.head_dim} is odd; rotary embeddings need an even one.")

    @property
    def family(self) -> Family:
        return FAMILIES[self.architecture]

    @property
    def group_size(self) -> int:
        return self.num_heads // self.num_kv_heads

    def inv_freq(self) -> np.ndarray:
        """Rotary inverse frequencies (head_dim/2,), with Llama-3 scaling applied when configured."""
        inv = 1.0 / (self.rope_theta ** (np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim))
        if self.rope_freq_factors is not None:
            inv = inv / np.asarray(self.rope_freq_factors, dtype=np.float64)
        elif self.rope_scaling is not None:
            inv = _llama3_scale(inv, self.rope_scaling)
        return inv.astype(np.float32)


def _llama3_scale(inv_freq: np.ndarray, s: RopeScaling) -> np.ndarray:
    """Llama-3 scaling: long wavelengths divided by `factor`, short kept, a smooth blend between."""
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, blended, scaled)


def binding_window(window: Any, max_positions: int) -> int | None:
    """The sliding window if it can ever exclude a key, else None (a window at least as long as the
    longest context the model may serve never masks anything)."""
    if window is None:
        return None
    window = int(window)
    return window if window < max_positions else None


def _require(meta: Mapping[str, Any], key: str, source: str) -> Any:
    if key not in meta:
        raise ModelFormatError(f"{source} lacks the required metadata key {key!r}; the file is incomplete or not a Llama model.")
    return meta[key]


def config_from_gguf(meta: Mapping[str, Any], vocab_size: int, has_output_tensor: bool,
                     rope_freq_factors: tuple[float, ...] | None, source: str) -> ModelConfig:
    """Translate GGUF key-value metadata (already decoded to Python values) into a ModelConfig."""
    arch = _require(meta, "general.architecture", source)
    if arch not in SUPPORTED_GGUF_ARCHITECTURES:
        raise ModelFormatError(
            f"{source} holds a {arch!r} model; memloop's engine runs {', '.join(SUPPORTED_GGUF_ARCHITECTURES)} "
            "models. Choose a checkpoint of one of these architectures."
        )
    family = FAMILIES[arch]
    p = f"{arch}."
    hidden = int(_require(meta, p + "embedding_length", source))
    heads = int(_require(meta, p + "attention.head_count", source))
    kv_heads = int(meta.get(p + "attention.head_count_kv", heads))
    # Qwen3 heads are wider than hidden / heads; llama.cpp writes the width as attention.key_length.
    head_dim = int(meta.get(p + "attention.key_length", meta.get(p + "rope.dimension_count", hidden // heads)))
    scaling = None
    if meta.get(p + "rope.scaling.type") == "llama3" and rope_freq_factors is None:
        raise ModelFormatError(f"{source} declares llama3 rope scaling without the rope_freqs tensor.")
    context = int(meta.get(p + "context_length", 2048))
    return ModelConfig(
        vocab_size=int(meta.get(p + "vocab_size", vocab_size)),
        hidden_size=hidden,
        intermediate_size=int(_require(meta, p + "feed_forward_length", source)),
        num_layers=int(_require(meta, p + "block_count", source)),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rope_theta=float(meta.get(p + "rope.freq_base", 10000.0)),
        rms_norm_eps=float(meta.get(p + "attention.layer_norm_rms_epsilon", 1e-5)),
        tie_word_embeddings=not has_output_tensor,
        max_position_embeddings=context,
        rope_scaling=scaling,
        rope_freq_factors=rope_freq_factors,
        architecture=arch,
        attention_bias=family.attention_bias,
        qk_norm=family.qk_norm,
        sliding_window=binding_window(meta.get(p + "attention.sliding_window"), context),
    )


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    """Translate a Hugging Face `config.json` dictionary into a ModelConfig."""
    archs = cfg.get("architectures") or [cfg.get("model_type", "?")]
    arch = next((_HF_TO_ARCH[a] for a in archs if a in _HF_TO_ARCH), None)
    if arch is None and cfg.get("model_type") in FAMILIES:
        arch = cfg["model_type"]
    if arch is None:
        raise ModelFormatError(
            f"{source} describes a {archs[0]!r} model; memloop's engine runs "
            f"{', '.join(SUPPORTED_HF_ARCHITECTURES)} checkpoints."
        )
    family = FAMILIES[arch]
    if cfg.get("use_sliding_window"):
        raise ModelFormatError(f"{source} enables sliding-window attention, which memloop's engine does not run; "
                               "set use_sliding_window to false only if the model was trained without it.")
    hidden = int(_require(cfg, "hidden_size", source))
    heads = int(_require(cfg, "num_attention_heads", source))
    context = int(cfg.get("max_position_embeddings", 2048))
    window = binding_window(cfg.get("sliding_window"), context) if family.hf_sliding_window else None
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or None
    theta = cfg.get("rope_theta") or (rope or {}).get("rope_theta") or 10000.0
    scaling = None
    if rope and rope.get("rope_type", rope.get("type")) == "llama3":
        scaling = RopeScaling(
            factor=float(rope["factor"]),
            low_freq_factor=float(rope["low_freq_factor"]),
            high_freq_factor=float(rope["high_freq_factor"]),
            original_max_position_embeddings=int(rope["original_max_position_embeddings"]),
        )
    elif rope and rope.get("rope_type", rope.get("type")) not in (None, "default"):
        raise ModelFormatError(f"{source}: rope scaling {rope!r} is not supported (only llama3 and default).")
    return ModelConfig(
        vocab_size=int(_require(cfg, "vocab_size", source)),
        hidden_size=hidden,
        intermediate_size=int(_require(cfg, "intermediate_size", source)),
        num_layers=int(_require(cfg, "num_hidden_layers", source)),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        rope_theta=float(theta),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=context,
        rope_scaling=scaling,
        architecture=arch,
        # Llama's (and Qwen3's) config.json may set attention_bias; Qwen2 always has q/k/v biases.
        attention_bias=bool(cfg.get("attention_bias", family.attention_bias)),
        qk_norm=family.qk_norm,
        sliding_window=window,
    )
