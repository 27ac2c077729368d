"""The decoder of every supported family (Llama, Qwen2/3, Mistral, Gemma 2/3) in Flax NNX, written so
every KV-cache layout reuses the same math; a family's differences are ModelConfig/Family fields.

Public API (what the serving engine builds on):

    lm = load_model(path_or_None, dtype=None, mesh=None) -> LoadedModel
        .config: ModelConfig      .module: Llama (nnx.Module)     .tokenizer: memloop.engine.model.tokenizer.Tokenizer
        .params: Params  -- pure pytree of jax arrays (the module's own arrays), pass it to jitted code
        .dtype, .path, .mesh

    Pure functions over `params` (all shapes static under jit, `cfg` static):
      embed(params, cfg, tokens[B,T]) -> h[B,T,D]  (Gemma: times sqrt(hidden))
      decoder_layers(params, cfg, h, positions[B,T], cache, attend) -> (h, cache)
          runs all layers with one `jax.lax.scan`; `cache` is any pytree the `attend` callable
          understands and is threaded through the scan carry (so in-place updates stay in place).
      final_logits(params, cfg, h[..., D]) -> logits[..., V] (f32), final RMSNorm + output head
      forward(params, cfg, tokens, positions, cache, attend) -> (logits[B,T,V], cache)

    The attention callable (the pluggable KV write/read):
      attend(q[B,T,H,hd], k[B,T,KV,hd], v[B,T,KV,hd], cache, layer: int32 scalar[, window=W][, softcap=C])
          -> (out[B,T,H,hd], cache)
      q and k arrive with rotary embeddings applied (q also carries Gemma's query_pre_attn_scalar).
      `window` is passed only for a layer a binding sliding window masks (ModelConfig.layer_window; a
      traced int32 under `lax.scan` when local and global layers interleave, NO_WINDOW for global ones):
      keys at positions <= p - W are masked for a query at p (`causal_mask`). `softcap` is passed only
      with ModelConfig.attn_softcap (Gemma 2). An attend without these keywords fails loudly rather
      than ignore them. `contiguous_attention(positions)` is the one
      used by generate()'s decode steps on a (layers, kv_heads, batch, max_len, head_dim) cache, and
      `prompt_attention(positions)` its prefill's (the same cache writes; it attends over the prompt's
      own keys); a paged variant writes pages and gathers them, calling `gqa_attention` for the math.

    gqa_attention(q, k, v, mask[B,T,S], cap=None) -> out: grouped-query softmax attention in f32 (k/v [KV,B,S,hd]).
    matmul(x, w): every layer matrix ([out, in]) goes through it; `w` is dense or, with
    load_model(packed=True), {"q": int8, "d": f32, "m": f32} Q4/Q8 blocks de-quantised in the graph.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from memloop.engine.errors import RequestError
from memloop.engine.model.blocks import BlockMatrix, block_matmul, block_matmuls, take_rows
from memloop.engine.model.config import ModelConfig
from memloop.engine.model.mesh import AXIS, constrain
from memloop.engine.model.weights import Params, load_weights

AttendFn = Callable[[jax.Array, jax.Array, jax.Array, Any, jax.Array], tuple[jax.Array, Any]]

LAYER_KEYS = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")
BIAS_KEYS = ("bq", "bk", "bv")  # present only for checkpoints with q/k/v biases (ModelConfig.attention_bias)
QK_NORM_KEYS = ("q_norm", "k_norm")  # [head_dim] each, only with ModelConfig.qk_norm (Qwen3, Gemma 3)
SANDWICH_KEYS = ("post_attn_norm", "post_mlp_norm")  # [hidden] each, only with Family.sandwich_norms (Gemma)
OPTIONAL_KEYS = BIAS_KEYS + QK_NORM_KEYS + SANDWICH_KEYS
# The window a global layer passes when per-layer windows are traced (the `lax.scan` path): larger
# than any position, so `key > query - NO_WINDOW` always holds, and small enough not to overflow int32.
NO_WINDOW = 1 << 30


def default_dtype() -> jnp.dtype:
    """f32 on CPU (exact reference match, fast XLA:CPU kernels), bf16 on accelerators."""
    return jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16


def default_unroll() -> bool:
    """Loop over layers in Python on CPU, `lax.scan` elsewhere.

    XLA:CPU copies each layer's weights out of a stacked array before every matmul (dynamic slice is
    not fused into its dot), which doubled batch-1 decode time; separate per-layer arrays are read in
    place. On TPU/GPU the slice fuses and a scan keeps compile time flat in depth.
    """
    return jax.default_backend() == "cpu"


# Attention with at most this many query rows per KV head (G heads x T tokens) puts the keys on the left.
FEW_QUERY_ROWS = 16


class DecoderStack(nnx.Module):
    """All decoder layers' weights: stacked on a leading layer axis (for `lax.scan`), or one set of
    arrays per layer (`unrolled`, for a Python loop over layers; see `default_unroll`).

    A packed matrix (see memloop.engine.model.weights.load_gguf) is held as three Params `<key>_q/_d/_m`.
    Per-layer arrays carry a `_<layer>` suffix.
    """

    def __init__(self, layers: dict[str, Any], dtype: Any, unrolled: bool = False) -> None:
        self.num = int(np.shape(layers["attn_norm"])[0])  # norms are never packed
        self.unrolled = unrolled
        self.parts: dict[str, tuple[str, ...]] = {}
        self.blocks: dict[str, tuple[str, tuple[int, int]]] = {}  # "<key>_<layer>" -> block type, shape
        for key in LAYER_KEYS + tuple(k for k in OPTIONAL_KEYS if k in layers):
            value = layers[key]
            if isinstance(value, list):  # one entry per layer: a BlockMatrix or a dense array
                if not unrolled:
                    raise ValueError("per-layer (block-form) weights need the unrolled layer loop")
                self.parts[key] = ()
                for i, w in enumerate(value):
                    if isinstance(w, BlockMatrix):
                        self.blocks[_attr(key, "", i)] = (w.qtype, w.shape)
                        setattr(self, _attr(key, "", i), nnx.Param(jnp.asarray(w.raw)))
                    else:
                        setattr(self, _attr(key, "", i), nnx.Param(jnp.asarray(w, dtype=dtype)))
                continue
            if isinstance(value, dict):
                self.parts[key] = ("q", "d", "m")
                arrays = {p: np.asarray(value[p]) for p in ("q", "d", "m")}
            else:
                self.parts[key] = ()
                arrays = {"": np.asarray(value)}
            for part, arr in arrays.items():
                target = arr.dtype if part else dtype
                if unrolled:
                    for i in range(self.num):
                        setattr(self, _attr(key, part, i), nnx.Param(jnp.asarray(arr[i], dtype=target)))
                else:
                    setattr(self, _attr(key, part, None), nnx.Param(jnp.asarray(arr, dtype=target)))

    def _get(self, key: str, i: int | None) -> Any:
        if self.parts[key]:
            return {p: getattr(self, _attr(key, p, i))[...] for p in self.parts[key]}
        value = getattr(self, _attr(key, "", i))[...]
        meta = self.blocks.get(_attr(key, "", i)) if i is not None else None
        return BlockMatrix(value, *meta) if meta else value

    def _layer(self, i: int | None) -> dict[str, Any]:
        return {k: self._get(k, i) for k in self.parts}

    def params(self) -> dict[str, Any] | list[dict[str, Any]]:
        if self.unrolled:
            return [self._layer(i) for i in range(self.num)]
        return self._layer(None)

    def rebind(self, layers: dict[str, Any] | list[dict[str, Any]]) -> None:
        for i, lw in enumerate(layers) if self.unrolled else [(None, layers)]:
            for k in self.parts:
                for p in self.parts[k] or ("",):
                    value = lw[k][p] if p else lw[k]
                    getattr(self, _attr(k, p, i))[...] = value.raw if isinstance(value, BlockMatrix) else value


def _attr(key: str, part: str, layer: int | None) -> str:
    name = f"{key}_{part}" if part else key
    return name if layer is None else f"{name}_{layer}"


class Llama(nnx.Module):
    """Token embedding, `num_layers` pre-norm blocks (GQA attention + SwiGLU MLP), final norm, head."""

    def __init__(self, config: ModelConfig, weights: Params, dtype: Any, unrolled: bool = False) -> None:
        self.config = config
        # A block-form matrix keeps its raw bytes as the Param and its type and shape beside it.
        self.block_meta: dict[str, tuple[str, tuple[int, int]]] = {}
        self.embed = self._param("embed", weights["embed"], dtype)
        self.final_norm = nnx.Param(jnp.asarray(weights["final_norm"], dtype=dtype))
        self.lm_head = self._param("lm_head", weights["lm_head"], dtype) if "lm_head" in weights else None
        self.layers = DecoderStack(weights["layers"], dtype, unrolled=unrolled)

    def _param(self, name: str, value: Any, dtype: Any) -> nnx.Param:
        if isinstance(value, BlockMatrix):
            self.block_meta[name] = (value.qtype, value.shape)
            return nnx.Param(jnp.asarray(value.raw))
        return nnx.Param(jnp.asarray(value, dtype=dtype))

    def _value(self, name: str, param: nnx.Param) -> Any:
        meta = self.block_meta.get(name)
        return BlockMatrix(param[...], *meta) if meta else param[...]

    def params(self) -> Params:
        """The module's arrays as a plain pytree for jitted pure functions (no copies)."""
        p: Params = {
            "embed": self._value("embed", self.embed),
            "final_norm": self.final_norm[...],
            "layers": self.layers.params(),
        }
        if self.lm_head is not None:
            p["lm_head"] = self._value("lm_head", self.lm_head)
        return p

    def __call__(self, tokens: jax.Array, positions: jax.Array, cache: Any, attend: AttendFn) -> tuple[jax.Array, Any]:
        return forward(self.params(), self.config, tokens, positions, cache, attend)


# ----------------------------------------------------------------------------- the math


def rms_norm(x: jax.Array, w: jax.Array, eps: float, offset: float = 0.0) -> jax.Array:
    """RMSNorm in f32; the scale is `offset + w` (Gemma checkpoints store w - 1: offset 1.0)."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    scale = w.astype(jnp.float32) + offset if offset else w.astype(jnp.float32)
    return (y * scale).astype(x.dtype)


def soft_cap(x: jax.Array, cap: float | None) -> jax.Array:
    """cap * tanh(x / cap) (Gemma's soft-capping of attention scores and logits); identity for None."""
    return x if cap is None else jnp.tanh(x / cap) * cap


Rope = tuple[jax.Array, jax.Array]  # (cos, sin) of the rotary angles, each [B,T,1,hd/2]


def rope_tables(positions: jax.Array, inv_freq: jax.Array) -> Rope:
    """cos and sin of the rotary angles for `positions` [B,T] ([..., B,T,1,hd/2] for stacked [..., hd/2]
    `inv_freq`): the same in every layer with these frequencies, so a forward computes them once."""
    angles = positions.astype(jnp.float32)[..., None] * inv_freq[..., None, None, :]  # [..., B,T,hd/2]
    return jnp.cos(angles)[..., None, :], jnp.sin(angles)[..., None, :]


def _rope_tables_once(positions: jax.Array, inv_freq: jax.Array) -> Rope:
    """`rope_tables` for the unrolled (CPU) layer loop. XLA:CPU copies an elementwise producer into each
    consumer's fusion (an optimization barrier is dropped there), so plain tables would be computed again
    in each layer's q and k rotation: 60 sin/cos passes a decode step, 6% of batch 32's. A conditional is
    not fused across; both branches are the same function, so its predicate's value does not matter."""
    return jax.lax.cond(jnp.any(positions >= 0), rope_tables, rope_tables, positions, inv_freq)


def rotary(x: jax.Array, rope: Rope) -> jax.Array:
    """Rotate-half RoPE (the Hugging Face layout). x: [B,T,N,hd], rope: `rope_tables` for its positions."""
    cos, sin = rope
    half = x.shape[-1] // 2
    x1 = x[..., :half].astype(jnp.float32)
    x2 = x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def causal_mask(key_positions: jax.Array, query_positions: jax.Array, window: int | None) -> jax.Array:
    """[B,T,S] True where query t may attend key s: `key <= query`, and within a sliding window
    `key > query - window` (the Hugging Face convention: a query sees itself and window-1 before it).
    key_positions [S] or [B,S]; query_positions [B,T]."""
    keys = key_positions[None, None, :] if key_positions.ndim == 1 else key_positions[:, None, :]
    queries = query_positions[:, :, None]
    mask = keys <= queries
    if window is not None:
        mask = mask & (keys > queries - window)
    return mask


def gqa_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, cap: float | None = None) -> jax.Array:
    """Softmax attention with grouped KV heads. q [B,T,H,hd]; k/v KV-head-major [KV,B,S,hd] (the
    cache layout); mask [B,T,S] (True = attend); `cap` soft-caps the scaled scores before the mask.

    The G query heads of a KV head and the T query tokens fold into one row axis, so scores and
    output are two batched matmuls over (KV, B) with no transpose of the (large) keys and values.
    With few query rows (decoding) the keys are the left operand: the dot libraries pack their right
    operand, and packing a whole cache for three query rows cost more than the product (2-3x slower).
    """
    b, t, h, hd = q.shape
    kv, s = k.shape[0], k.shape[2]
    g = h // kv
    qg = q.reshape(b, t, kv, g, hd).transpose(2, 0, 3, 1, 4).reshape(kv, b, g * t, hd)
    low = jnp.finfo(jnp.float32).min
    if g * t <= FEW_QUERY_ROWS:  # scores [KV,B,S,rows], softmax over S
        scores = soft_cap(jnp.einsum("kbsd,kbqd->kbsq", k, qg, preferred_element_type=jnp.float32) * (hd**-0.5), cap)
        allowed = jnp.broadcast_to(mask.transpose(0, 2, 1)[None, :, :, None, :], (kv, b, s, g, t))
        scores = jnp.where(allowed.reshape(kv, b, s, g * t), scores, low)
        probs = jax.nn.softmax(scores, axis=-2).astype(v.dtype)
        out = jnp.einsum("kbsq,kbsd->kbqd", probs, v, preferred_element_type=jnp.float32)
    else:  # scores [KV,B,rows,S]
        scores = soft_cap(jnp.einsum("kbqd,kbsd->kbqs", qg, k, preferred_element_type=jnp.float32) * (hd**-0.5), cap)
        allowed = jnp.broadcast_to(mask[None, :, None], (kv, b, g, t, s)).reshape(kv, b, g * t, s)
        scores = jnp.where(allowed, scores, low)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("kbqs,kbsd->kbqd", probs, v, preferred_element_type=jnp.float32)
    return out.reshape(kv, b, g, t, hd).transpose(1, 3, 0, 2, 4).reshape(b, t, h, hd).astype(q.dtype)


def kv_major(x: jax.Array) -> jax.Array:
    """New keys or values [B,T,KV,hd] -> [KV,B,T,hd], the cache and attention layout."""
    return x.transpose(2, 0, 1, 3)


def matmul(x: jax.Array, w: Any) -> jax.Array:
    """x @ w.T for an output-major matrix w [out, in]: dense; a BlockMatrix (GGUF blocks, see
    memloop.engine.model.blocks); or packed {q int8 [out,in], d/m f32 [out,in/32]} de-quantised in the graph
    (a GGUF file's own blocks with `packed`, or memloop.engine.model.quantize's int8)."""
    if isinstance(w, BlockMatrix):
        return block_matmul(x, w).astype(x.dtype)
    if isinstance(w, dict):
        q, d, m = w["q"], w["d"], w["m"]
        d_out, d_in = q.shape
        dense = q.astype(jnp.float32).reshape(d_out, d_in // 32, 32) * d[..., None] + m[..., None]
        w = dense.reshape(d_out, d_in).astype(x.dtype)
    return jnp.einsum("...i,oi->...o", x, w)


def matmuls(x: jax.Array, ws: list[Any]) -> list[jax.Array]:
    """[matmul(x, w) for w in ws]; block-form matrices sharing x go to the CPU kernel in one call."""
    if all(isinstance(w, BlockMatrix) for w in ws):
        return [y.astype(x.dtype) for y in block_matmuls(x, ws)]
    return [matmul(x, w) for w in ws]


def embed(params: Params, cfg: ModelConfig, tokens: jax.Array) -> jax.Array:
    """Embedding rows of `tokens`; Gemma scales them by sqrt(hidden), rounded to the activation dtype
    first as transformers does."""
    table = params["embed"]
    if isinstance(table, BlockMatrix):
        h = take_rows(table, tokens).astype(params["final_norm"].dtype)
    else:
        h = jnp.take(table, tokens, axis=0)
    if cfg.family.embed_scale:
        h = h * jnp.asarray(np.float32(cfg.hidden_size**0.5), dtype=h.dtype)
    return h


def _activation(cfg: ModelConfig, x: jax.Array) -> jax.Array:
    if cfg.family.activation == "gelu_tanh":  # GeGLU (Gemma): transformers' gelu_pytorch_tanh
        return jax.nn.gelu(x, approximate=True)
    return jax.nn.silu(x)


def decoder_layer(
    cfg: ModelConfig,
    lw: Params,
    h: jax.Array,
    positions: jax.Array,
    cache: Any,
    layer: jax.Array | int,
    attend: AttendFn,
    rope: Rope,
    window: int | jax.Array | None = None,
) -> tuple[jax.Array, Any]:
    """One pre-norm block: h + attn(norm(h)), then + GLU(norm(h)); Gemma also norms each branch's
    output before adding it (`sandwich_norms`). `rope`: this layer's `rope_tables`; `window`: its
    sliding window (None: none)."""
    b, t, _ = h.shape
    off = cfg.family.norm_offset
    x = rms_norm(h, lw["attn_norm"], cfg.rms_norm_eps, off)
    q, k, v = matmuls(x, [lw["wq"], lw["wk"], lw["wv"]])
    if cfg.attention_bias:
        q, k, v = q + lw["bq"].astype(q.dtype), k + lw["bk"].astype(k.dtype), v + lw["bv"].astype(v.dtype)
    q = q.reshape(b, t, cfg.num_heads, cfg.head_dim)
    k = k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    v = v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    if cfg.qk_norm:  # Qwen3, Gemma 3: RMSNorm over each head's vector, before the rotation
        q, k = rms_norm(q, lw["q_norm"], cfg.rms_norm_eps, off), rms_norm(k, lw["k_norm"], cfg.rms_norm_eps, off)
    q = rotary(q, rope)
    k = rotary(k, rope)
    if cfg.query_pre_attn_scalar is not None and cfg.query_pre_attn_scalar != cfg.head_dim:
        # Scores are q.k / sqrt(query_pre_attn_scalar); attention divides by sqrt(head_dim), so q carries the rest.
        q = q * jnp.asarray((cfg.head_dim / cfg.query_pre_attn_scalar) ** 0.5, q.dtype)
    # Extra keywords only when set, so an attention callable that does not know them fails loudly.
    extra: dict[str, Any] = {} if window is None else {"window": window}
    if cfg.attn_softcap is not None:
        extra["softcap"] = cfg.attn_softcap
    attn, cache = attend(q, k, v, cache, layer, **extra)
    out = matmul(attn.reshape(b, t, cfg.num_heads * cfg.head_dim), lw["wo"])
    if cfg.family.sandwich_norms:
        out = rms_norm(out, lw["post_attn_norm"], cfg.rms_norm_eps, off)
    h = h + out
    x = rms_norm(h, lw["mlp_norm"], cfg.rms_norm_eps, off)
    gate, up = matmuls(x, [lw["w_gate"], lw["w_up"]])
    inner = constrain(_activation(cfg, gate) * up, None, None, AXIS)
    out = matmul(inner, lw["w_down"])
    if cfg.family.sandwich_norms:
        out = rms_norm(out, lw["post_mlp_norm"], cfg.rms_norm_eps, off)
    h = constrain(h + out, None, None, None)
    return h, cache


def decoder_layers(
    params: Params,
    cfg: ModelConfig,
    h: jax.Array,
    positions: jax.Array,
    cache: Any,
    attend: AttendFn,
    first: int | jax.Array = 0,
    count: int | None = None,
) -> tuple[jax.Array, Any]:
    """All layers, or the `count` layers from `first` (prompt scoring runs a forward in spans, so an
    abandoned one can stop between them): a Python loop over per-layer weights (`params["layers"]` a
    list, see `default_unroll`; `first` a Python int), or one `lax.scan` over stacked weights with the
    cache riding in the carry (`first` may be traced: one program serves every span of a length)."""
    n = cfg.num_layers if count is None else count
    if isinstance(params["layers"], (list, tuple)):
        tables: dict[bytes, Rope] = {}  # one per distinct frequency set (two in Gemma 3, one elsewhere)
        for i in range(first, first + n):
            freq = cfg.inv_freq(i)
            key = freq.tobytes()
            if key not in tables:
                tables[key] = _rope_tables_once(positions, jnp.asarray(freq))
            rope, window = tables[key], cfg.layer_window(i)
            h, cache = decoder_layer(cfg, params["layers"][i], h, positions, cache, i, attend, rope, window)
        return h, cache

    def span(x: jax.Array) -> jax.Array:
        return x if count is None else jax.lax.dynamic_slice_in_dim(x, first, n)

    layer_ids = span(jnp.arange(cfg.num_layers, dtype=jnp.int32))
    layers = jax.tree.map(span, params["layers"])
    if cfg.uniform_layers:  # one window and one rotary table for all layers: static
        rope, window = rope_tables(positions, jnp.asarray(cfg.inv_freq())), cfg.layer_window(0)
        xs = (layers, layer_ids)
    else:  # interleaved local/global layers (Gemma): per-layer windows and rotary tables ride in xs
        freqs = span(jnp.asarray(np.stack([cfg.inv_freq(i) for i in range(cfg.num_layers)])))
        window = None
        if cfg.sliding_window is not None:
            window = span(jnp.asarray([cfg.layer_window(i) or NO_WINDOW for i in range(cfg.num_layers)], jnp.int32))
        xs = (layers, layer_ids, rope_tables(positions, freqs), window)

    def body(carry, xs):
        h, cache = carry
        if len(xs) == 2:
            (lw, layer), rp, win = xs, rope, window
        else:
            lw, layer, rp, win = xs
        return decoder_layer(cfg, lw, h, positions, cache, layer, attend, rp, win), None

    (h, cache), _ = jax.lax.scan(body, (h, cache), xs)
    return h, cache


def final_logits(params: Params, cfg: ModelConfig, h: jax.Array) -> jax.Array:
    """Final RMSNorm and the output head (tied to the embedding when the checkpoint has none); f32 logits."""
    x = rms_norm(h, params["final_norm"], cfg.rms_norm_eps, cfg.family.norm_offset)
    head = params["lm_head"] if "lm_head" in params else params["embed"]  # both [V, D]
    if isinstance(head, BlockMatrix):
        return soft_cap(block_matmul(x, head), cfg.final_softcap)
    return soft_cap(jnp.einsum("...d,vd->...v", x, head, preferred_element_type=jnp.float32), cfg.final_softcap)


def forward(
    params: Params, cfg: ModelConfig, tokens: jax.Array, positions: jax.Array, cache: Any, attend: AttendFn
) -> tuple[jax.Array, Any]:
    h, cache = decoder_layers(params, cfg, embed(params, cfg, tokens), positions, cache, attend)
    return final_logits(params, cfg, h), cache


# ----------------------------------------------------------------------------- contiguous KV cache


def init_contiguous_cache(
    cfg: ModelConfig, batch: int, max_len: int, dtype: Any, per_layer: bool = False
) -> dict[str, Any]:
    """[L,KV,B,S,hd] keys and values, or (per_layer, matching unrolled weights) L arrays [KV,B,S,hd]."""
    return init_layer_cache(cfg, (cfg.num_kv_heads, batch, max_len, cfg.head_dim), dtype, per_layer)


def init_layer_cache(cfg: ModelConfig, shape: tuple[int, ...], dtype: Any, per_layer: bool) -> dict[str, Any]:
    """Zeroed keys and values of `shape` per layer: stacked on a leading axis, or a list per layer.

    A list lets each layer's slice be read and updated in place when layers are unrolled (a static
    slice of a stacked buffer is copied on XLA:CPU); a stacked buffer rides in a scan's carry."""
    if per_layer:
        return {
            "k": [jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)],
            "v": [jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)],
        }
    return {"k": jnp.zeros((cfg.num_layers, *shape), dtype), "v": jnp.zeros((cfg.num_layers, *shape), dtype)}


def cache_set(store: Any, layer: jax.Array | int, index: tuple, value: jax.Array, **kw: Any) -> Any:
    """Write `value` at `index` of one layer of a stacked cache array or a per-layer list."""
    if isinstance(store, (list, tuple)):
        out = list(store)
        out[layer] = store[layer].at[index].set(value.astype(store[layer].dtype), **kw)
        return out
    return store.at[(layer, *index)].set(value.astype(store.dtype), **kw)


def contiguous_attention(positions: jax.Array) -> AttendFn:
    """KV write/read on a [L,KV,B,S,hd] cache (or per-layer [KV,B,S,hd] list): token at position p of
    row b lives in slot p.

    Causality is `slot <= query position`, so right-padded rows of unequal length need no extra mask:
    a padded token writes a slot that is masked until the real token at that position overwrites it.
    """

    def attend(q, k, v, cache, layer, window=None, softcap=None):
        ck, cv = _write_kv(cache, layer, positions, k, v)
        keys, values = ck[layer], cv[layer]
        mask = causal_mask(jnp.arange(keys.shape[2]), positions, window)
        return gqa_attention(q, keys, values, mask, softcap), {"k": ck, "v": cv}

    return attend


def _write_kv(
    cache: dict[str, Any], layer: jax.Array | int, positions: jax.Array, k: jax.Array, v: jax.Array
) -> tuple[Any, Any]:
    """The contiguous cache with this call's keys and values [B,T,KV,hd] at slots `positions` [B,T]."""
    b, _, kvh, _ = k.shape
    index = (jnp.arange(kvh)[:, None, None], jnp.arange(b)[None, :, None], positions[None])
    return (
        cache_set(cache["k"], layer, index, kv_major(k), mode="drop"),
        cache_set(cache["v"], layer, index, kv_major(v), mode="drop"),
    )


def prompt_attention(positions: jax.Array) -> AttendFn:
    """`contiguous_attention` for a prompt that fills slots 0..T-1 (positions [B,T], each row 0..T-1): the
    keys and values go to the cache as there, but attention reads this call's own T keys, not the cache's
    S slots. Every slot past T is masked for these queries, so only the work changes: a 512-token prompt in
    a 1024-slot cache computed twice the scores it needed and read each layer's cache back."""

    def attend(q, k, v, cache, layer, window=None, softcap=None):
        ck, cv = _write_kv(cache, layer, positions, k, v)
        dtype = (ck[layer] if isinstance(ck, (list, tuple)) else ck).dtype  # the keys as the cache holds them
        keys, values = kv_major(k).astype(dtype), kv_major(v).astype(dtype)
        mask = causal_mask(positions, positions, window)
        return gqa_attention(q, keys, values, mask, softcap), {"k": ck, "v": cv}

    return attend


def no_cache_attention(positions: jax.Array) -> AttendFn:
    """Plain causal self-attention over the tokens of this call (no cache); for reference checks."""

    def attend(q, k, v, cache, layer, window=None, softcap=None):
        mask = causal_mask(positions, positions, window)
        return gqa_attention(q, kv_major(k), kv_major(v), mask, softcap), cache

    return attend


# ----------------------------------------------------------------------------- loading


@dataclasses.dataclass
class LoadedModel:
    config: ModelConfig
    module: Llama
    params: Params
    tokenizer: Any  # memloop.engine.model.tokenizer.Tokenizer
    dtype: Any
    path: Path
    mesh: Any = None

    @property
    def per_layer(self) -> bool:
        """Weights are a list per layer, so KV caches must be too (see init_layer_cache)."""
        return isinstance(self.params["layers"], (list, tuple))

    @property
    def weight_path(self) -> dict[str, Any]:
        """Which weight path this model runs, for provenance and benchmarks: "kernel" (block-form
        matrices through the CPU kernels, with the ISA they are built for) or "dense" (with why)."""
        from memloop.engine import kernels
        from memloop.engine.model.blocks import BlockMatrix

        leaves = jax.tree_util.tree_leaves(self.params, is_leaf=lambda x: isinstance(x, BlockMatrix))
        if any(isinstance(x, BlockMatrix) for x in leaves):
            return {"weights": "kernel", "isa": kernels.isa(), "why_dense": None}
        path = kernels.weight_path()
        if path["weights"] == "kernel":  # the kernels are here, this model does not use them
            why = (
                "not a GGUF file"
                if self.path.suffix != ".gguf"
                else "not the CPU backend"
                if jax.default_backend() != "cpu"
                else "float32 compute, one device and unpacked per-layer weights are needed"
            )
            path = {"weights": "dense", "isa": None, "why_dense": why}
        return path


def load_model(
    path: str | Path | None = None,
    dtype: Any = None,
    mesh: Any = None,
    load_tokenizer: bool = True,
    packed: bool = False,
    unroll: bool | None = None,
    blocks: bool | None = None,
    quantize: str | None = None,
) -> LoadedModel:
    """Load weights (GGUF file or Hugging Face directory), build the module, and the tokenizer.

    `path=None` loads the bundled SmolLM2-135M-Instruct GGUF; a short name (`qwen2.5-coder-0.5b`, see
    memloop.engine.assets.MODELS) loads that packaged model. `packed` keeps Q4_0/Q4_1/Q8_0 layer
    matrices in their block form (int8 codes + f32 block scales), de-quantised inside each step to the
    same values (a quarter of the weight bytes; measured on CPU it speeds up batch-1 decoding a
    little and slows large batches, so it is off by default). `unroll` (default on CPU) keeps one set
    of arrays per layer for a Python layer loop (see `default_unroll`). `mesh` (a jax.sharding.Mesh from
    memloop.engine.model.mesh) places the parameters tensor-parallel over its devices; otherwise one device.

    `blocks` keeps Q4_0/Q4_1/Q8_0 matrices as their raw GGUF bytes (memloop.engine.model.blocks), multiplied by
    the CPU kernel at small batch: 0.56-1.06 bytes per weight read instead of 4, the same weights.
    Default (None): on whenever it applies (see `blocks_apply`).

    `quantize="int8"` keeps every layer projection as int8 codes with an f32 scale and offset per 32
    weights (memloop.engine.model.quantize), de-quantised inside the step: weight-only, for accelerators' HBM bandwidth.
    """
    from memloop.engine.assets import enable_compile_cache, resolve_model
    from memloop.engine.model.tokenizer import load_tokenizer as _load_tok

    enable_compile_cache()
    path = resolve_model(path)
    dtype = jnp.dtype(dtype if dtype is not None else default_dtype())
    np_dtype = np.float32 if dtype == jnp.float32 else dtype  # numpy understands jnp.bfloat16 via ml_dtypes
    unroll = default_unroll() if unroll is None else bool(unroll)
    applies = blocks_apply(path, dtype, mesh, unroll, packed) and not quantize
    if blocks and not applies:
        raise RequestError(
            "block-form weights need a GGUF file, f32 on the CPU backend, one device, the unrolled "
            "layer loop, no `packed` or `quantize`, and the CPU kernels (x86-64 with AVX2, FMA and F16C); "
            "leave `blocks` unset."
        )
    if quantize and packed:
        raise RequestError("`packed` keeps a GGUF file's own blocks and `quantize` makes new ones; choose one.")
    blocks = applies if blocks is None else bool(blocks)
    # int8 blocks are cut from the f32 weights, not from a bf16 rounding of them
    cfg, weights = load_weights(path, np.float32 if quantize else np_dtype, packed=bool(packed), blocks=blocks)
    if quantize:
        from memloop.engine.model.quantize import quantize_layers

        weights["layers"] = quantize_layers(weights["layers"], quantize)
    module = Llama(cfg, weights, dtype, unrolled=unroll)
    del weights
    params = module.params()
    if mesh is not None:
        from memloop.engine.model.mesh import shard_params

        params = shard_params(params, cfg, mesh)
        _rebind(module, params)
    tokenizer = _load_tok(path) if load_tokenizer else None
    return LoadedModel(config=cfg, module=module, params=params, tokenizer=tokenizer, dtype=dtype, path=path, mesh=mesh)


def blocks_apply(path: Path, dtype: Any, mesh: Any, unroll: bool, packed: bool) -> bool:
    """Whether block-form weights can be used: a GGUF file, f32 compute on the CPU backend, one
    device (the kernel is not partitioned), the per-layer loop, and kernels that built here."""
    from memloop.engine import kernels

    return (
        path.suffix == ".gguf"
        and path.is_file()
        and jnp.dtype(dtype) == jnp.float32
        and mesh is None
        and unroll
        and not packed
        and jax.default_backend() == "cpu"
        and kernels.available()
    )


def _rebind(module: Llama, params: Params) -> None:
    """Point the module's Params at (sharded) arrays so module and pytree stay the same memory."""
    module.embed[...] = params["embed"]
    module.final_norm[...] = params["final_norm"]
    if module.lm_head is not None:
        module.lm_head[...] = params["lm_head"]
    module.layers.rebind(params["layers"])
