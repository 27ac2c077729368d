"""Hyper-parameters of a decoder (Llama, Qwen2, Qwen3, Mistral, Gemma 2/3), read from a checkpoint's own metadata.

Nothing here is specific to one model: the GGUF key-value metadata and a Hugging Face
`config.json` are both translated into the same frozen `ModelConfig`, which is hashable so it
can be a static argument of jitted functions.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np
from memloop.engine.errors import ModelFormatError

# Architecture name (GGUF `general.architecture`) -> Hugging Face class; all spell one decoder here.
# Their differences are ModelConfig fields (see FAMILIES), not separate model code. llama.cpp writes
# Mistral checkpoints as `llama` GGUFs, so "mistral" has no GGUF architecture of its own.
SUPPORTED_GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma2", "gemma3")
SUPPORTED_HF_ARCHITECTURES = (
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "MistralForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
)
_HF_TO_ARCH = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MistralForCausalLM": "mistral",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
}
_MODEL_TYPE_TO_ARCH = {"gemma3_text": "gemma3"}  # config.json model_type spellings that differ from the family key


@dataclasses.dataclass(frozen=True)
class Family:
    """What sets one architecture apart from Llama, as data the shared decoder reads."""

    attention_bias: bool  # q/k/v projections carry biases (Qwen2)
    gguf_qk_permuted: bool  # llama.cpp's converter permuted Q/K rows for its interleaved rotary (Llama only)
    qk_norm: bool = False  # per-head RMSNorm of q and k (weights [head_dim]) before RoPE (Qwen3)
    # config.json's `sliding_window` bounds every layer's attention (Mistral); the Qwen families gate
    # theirs behind `use_sliding_window` and apply it to some layers only, which is refused instead.
    hf_sliding_window: bool = False
    # Gemma: RMSNorm multiplies by (norm_offset + w) (checkpoints store w - 1; llama.cpp's converter adds
    # the 1 back into its GGUF norms, the loader takes it out again), embeddings times sqrt(hidden).
    norm_offset: float = 0.0
    embed_scale: bool = False
    activation: str = "silu"  # of the gated MLP: "silu" (SwiGLU) or "gelu_tanh" (GeGLU)
    sandwich_norms: bool = False  # a norm after attention and after the MLP too (post_attn_norm, post_mlp_norm)
    # Local (sliding-window) and global layers interleave: layer i is global when (i + 1) % n == 0, the
    # default of configs without `layer_types` and the rule llama.cpp applies to GGUFs.
    global_every: int | None = None
    # Attention/final logit soft-capping assumed when the checkpoint does not say (transformers' and
    # llama.cpp's defaults agree: Gemma 2 caps at 50 and 30).
    default_softcaps: tuple[float | None, float | None] = (None, None)
    local_rope_theta: float | None = None  # rotary base of local layers when unsaid (Gemma 3); None: the global one
    tied_default: bool = False  # config.json without `tie_word_embeddings` (transformers' class default)
    # Layer count -> query_pre_attn_scalar of GGUFs (which do not store it): llama.cpp's rule is
    # head_dim, except Gemma 27B models which use hidden / heads.
    gguf_hidden_per_head_scalar: tuple[int, ...] = ()


# What every Gemma generation shares; each adds its own below.
_GEMMA = Family(
    attention_bias=False,
    gguf_qk_permuted=False,
    hf_sliding_window=True,
    norm_offset=1.0,
    embed_scale=True,
    activation="gelu_tanh",
    sandwich_norms=True,
    tied_default=True,
)

FAMILIES = {
    "llama": Family(attention_bias=False, gguf_qk_permuted=True),
    "qwen2": Family(attention_bias=True, gguf_qk_permuted=False),
    "qwen3": Family(attention_bias=False, gguf_qk_permuted=False, qk_norm=True),
    "mistral": Family(attention_bias=False, gguf_qk_permuted=True, hf_sliding_window=True),
    "gemma2": dataclasses.replace(
        _GEMMA, global_every=2, default_softcaps=(50.0, 30.0), gguf_hidden_per_head_scalar=(46,)
    ),
    "gemma3": dataclasses.replace(
        _GEMMA, qk_norm=True, global_every=6, local_rope_theta=10000.0, gguf_hidden_per_head_scalar=(62,)
    ),
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
    # Indices of the local layers (Gemma): the window masks only these, and they rotate with
    # `rope_local_theta` when set. None: every layer is local (Mistral; or no window at all).
    local_layers: tuple[int, ...] | None = None
    rope_local_theta: float | None = None
    rope_linear_factor: float | None = None  # linear RoPE scaling (positions / factor) of the global layers
    # Attention scores are q.k / sqrt(query_pre_attn_scalar) (Gemma); None: / sqrt(head_dim).
    query_pre_attn_scalar: float | None = None
    attn_softcap: float | None = None  # scores -> cap * tanh(scores / cap) before the mask (Gemma 2)
    final_softcap: float | None = None  # the same on the output logits

    def __post_init__(self) -> None:
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ModelFormatError(
                f"sliding window {self.sliding_window} is not a positive number of tokens; "
                "the checkpoint metadata is inconsistent."
            )
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

    def is_local(self, layer: int) -> bool:
        return self.local_layers is None or layer in self.local_layers

    def layer_window(self, layer: int) -> int | None:
        """The sliding window masking `layer`'s attention, or None (global layer, or no binding window)."""
        return self.sliding_window if self.is_local(layer) else None

    @property
    def uniform_layers(self) -> bool:
        """Every layer has the same window and rotary frequencies (all but the interleaved Gemma models)."""
        return len({(self.layer_window(i), self._local_rope(i)) for i in range(self.num_layers)}) == 1

    def _local_rope(self, layer: int) -> bool:
        return self.rope_local_theta is not None and self.local_layers is not None and layer in self.local_layers

    def inv_freq(self, layer: int = 0) -> np.ndarray:
        """Rotary inverse frequencies (head_dim/2,) of `layer`: a Gemma 3 local layer rotates with its own
        base and no scaling; otherwise Llama-3 or linear scaling is applied when configured."""
        local = self._local_rope(layer)
        theta = self.rope_local_theta if local else self.rope_theta
        inv = 1.0 / (theta ** (np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim))
        if local:
            return inv.astype(np.float32)
        if self.rope_freq_factors is not None:
            inv = inv / np.asarray(self.rope_freq_factors, dtype=np.float64)
        elif self.rope_scaling is not None:
            inv = _llama3_scale(inv, self.rope_scaling)
        if self.rope_linear_factor is not None:
            inv = inv / self.rope_linear_factor
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
        raise ModelFormatError(
            f"{source} lacks the required metadata key {key!r}; the file is incomplete or not a Llama model."
        )
    return meta[key]


def config_from_gguf(
    meta: Mapping[str, Any],
    vocab_size: int,
    has_output_tensor: bool,
    rope_freq_factors: tuple[float, ...] | None,
    source: str,
) -> ModelConfig:
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
    rope_type = meta.get(p + "rope.scaling.type")
    if rope_type == "llama3" and rope_freq_factors is None:
        raise ModelFormatError(f"{source} declares llama3 rope scaling without the rope_freqs tensor.")
    linear = (
        float(meta[p + "rope.scaling.factor"]) if rope_type == "linear" and p + "rope.scaling.factor" in meta else None
    )
    context = int(meta.get(p + "context_length", 2048))
    layers = int(_require(meta, p + "block_count", source))
    gemma: dict[str, Any] = {}
    if family.global_every:
        pattern = meta.get(p + "attention.sliding_window_pattern")  # per-layer flags (true: local) where written
        attn_cap, final_cap = family.default_softcaps
        gemma = dict(
            local_layers=(
                tuple(i for i, f in enumerate(pattern) if f)
                if isinstance(pattern, (list, tuple))
                else _interleaved(layers, family.global_every)
            ),
            rope_local_theta=(
                float(meta.get(p + "rope.freq_base_swa", family.local_rope_theta)) if family.local_rope_theta else None
            ),
            query_pre_attn_scalar=float(hidden // heads if layers in family.gguf_hidden_per_head_scalar else head_dim),
            attn_softcap=_optional_float(meta.get(p + "attn_logit_softcapping", attn_cap)),
            final_softcap=_optional_float(meta.get(p + "final_logit_softcapping", final_cap)),
        )
    return ModelConfig(
        vocab_size=int(meta.get(p + "vocab_size", vocab_size)),
        hidden_size=hidden,
        intermediate_size=int(_require(meta, p + "feed_forward_length", source)),
        num_layers=layers,
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
        rope_linear_factor=linear,
        **gemma,
    )


def _interleaved(layers: int, global_every: int) -> tuple[int, ...]:
    """Local layer indices when every `global_every`-th layer is global (transformers' and llama.cpp's rule)."""
    return tuple(i for i in range(layers) if (i + 1) % global_every)


def _optional_float(value: Any) -> float | None:
    return None if value is None or float(value) == 0.0 else float(value)


def config_from_hf(cfg: Mapping[str, Any], source: str) -> ModelConfig:
    """Translate a Hugging Face `config.json` dictionary into a ModelConfig."""
    archs = cfg.get("architectures") or [cfg.get("model_type", "?")]
    arch = next((_HF_TO_ARCH[a] for a in archs if a in _HF_TO_ARCH), None)
    model_type = _MODEL_TYPE_TO_ARCH.get(cfg.get("model_type"), cfg.get("model_type"))
    if arch is None and model_type in FAMILIES:
        arch = model_type
    if arch is None:
        raise ModelFormatError(
            f"{source} describes a {archs[0]!r} model; memloop's engine runs "
            f"{', '.join(SUPPORTED_HF_ARCHITECTURES)} checkpoints."
        )
    family = FAMILIES[arch]
    if cfg.get("use_sliding_window"):
        raise ModelFormatError(
            f"{source} enables sliding-window attention, which memloop's engine does not run; "
            "set use_sliding_window to false only if the model was trained without it."
        )
    hidden = int(_require(cfg, "hidden_size", source))
    heads = int(_require(cfg, "num_attention_heads", source))
    context = int(cfg.get("max_position_embeddings", 2048))
    window = binding_window(cfg.get("sliding_window"), context) if family.hf_sliding_window else None
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or None
    local_rope: Mapping[str, Any] = {}
    if rope and "full_attention" in rope:  # per-layer-type rotary (Gemma 3, transformers >= 5)
        local_rope = rope.get("sliding_attention") or {}
        rope = rope["full_attention"]
    theta = cfg.get("rope_theta") or (rope or {}).get("rope_theta") or 10000.0
    scaling, linear = None, None
    if rope and rope.get("rope_type", rope.get("type")) == "llama3":
        scaling = RopeScaling(
            factor=float(rope["factor"]),
            low_freq_factor=float(rope["low_freq_factor"]),
            high_freq_factor=float(rope["high_freq_factor"]),
            original_max_position_embeddings=int(rope["original_max_position_embeddings"]),
        )
    elif rope and rope.get("rope_type", rope.get("type")) == "linear":
        linear = float(rope["factor"])
    elif rope and rope.get("rope_type", rope.get("type")) not in (None, "default"):
        raise ModelFormatError(f"{source}: rope scaling {rope!r} is not supported (only llama3, linear and default).")
    if local_rope.get("rope_type", "default") != "default":
        raise ModelFormatError(
            f"{source}: scaled rotary embeddings of the local layers ({local_rope!r}) are not supported."
        )
    layers = int(_require(cfg, "num_hidden_layers", source))
    gemma = _gemma_hf(cfg, family, layers, local_rope, source) if family.global_every else {}
    return ModelConfig(
        vocab_size=int(_require(cfg, "vocab_size", source)),
        hidden_size=hidden,
        intermediate_size=int(_require(cfg, "intermediate_size", source)),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        rope_theta=float(theta),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", family.tied_default)),
        max_position_embeddings=context,
        rope_scaling=scaling,
        architecture=arch,
        # Llama's (and Qwen3's) config.json may set attention_bias; Qwen2 always has q/k/v biases.
        attention_bias=bool(cfg.get("attention_bias", family.attention_bias)),
        qk_norm=family.qk_norm,
        sliding_window=window,
        rope_linear_factor=linear,
        **gemma,
    )


def _gemma_hf(
    cfg: Mapping[str, Any], family: Family, layers: int, local_rope: Mapping[str, Any], source: str
) -> dict[str, Any]:
    """The Gemma fields of a config.json: which layers are local, their rotary base, the query scale
    and the soft-caps (absent keys take transformers' class defaults)."""
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise ModelFormatError(
            f"{source}: MLP activation {act!r} is not supported; Gemma models use gelu_pytorch_tanh."
        )
    types = cfg.get("layer_types")
    if types is not None:
        if len(types) != layers or set(types) - {"sliding_attention", "full_attention"}:
            raise ModelFormatError(
                f"{source}: layer_types {types!r} do not name {layers} sliding/full attention layers."
            )
        local = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    else:
        every = cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern") or family.global_every
        local = _interleaved(layers, int(every))
    attn_cap, final_cap = family.default_softcaps
    return dict(
        local_layers=local,
        rope_local_theta=(
            float(local_rope.get("rope_theta") or cfg.get("rope_local_base_freq") or family.local_rope_theta)
            if family.local_rope_theta
            else None
        ),
        query_pre_attn_scalar=float(cfg.get("query_pre_attn_scalar", 256)),
        attn_softcap=_optional_float(cfg.get("attn_logit_softcapping", attn_cap)),
        final_softcap=_optional_float(cfg.get("final_logit_softcapping", final_cap)),
    )
