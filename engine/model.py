"""The Llama-family decoder in Flax NNX, written so every KV-cache layout reuses the same math.

Public API (what the serving engine builds on):

    lm = load_model(path_or_None, dtype=None, mesh=None) -> LoadedModel
        .config: ModelConfig      .module: Llama (nnx.Module)     .tokenizer: engine.tokenizer.Tokenizer
        .params: Params  -- pure pytree of jax arrays (the module's own arrays), pass it to jitted code
        .dtype, .path, .mesh

    Pure functions over `params` (all shapes static under jit, `cfg` static):
      embed(params, tokens[B,T]) -> h[B,T,D]
      decoder_layers(params, cfg, h, positions[B,T], cache, attend) -> (h, cache)
          runs all layers with one `jax.lax.scan`; `cache` is any pytree the `attend` callable
          understands and is threaded through the scan carry (so in-place updates stay in place).
      final_logits(params, cfg, h[..., D]) -> logits[..., V] (f32), final RMSNorm + output head
      forward(params, cfg, tokens, positions, cache, attend) -> (logits[B,T,V], cache)

    The attention callable (the pluggable KV write/read):
      attend(q[B,T,H,hd], k[B,T,KV,hd], v[B,T,KV,hd], cache, layer: int32 scalar) -> (out[B,T,H,hd], cache)
      q and k arrive with rotary embeddings applied. `contiguous_attention(positions)` is the one
      used by generate() on a (layers, batch, max_len, kv_heads, head_dim) cache; a paged variant
      writes pages and gathers them, calling `gqa_attention` for the math.

    gqa_attention(q, k, v, mask[B,T,S]) -> out: grouped-query softmax attention in f32.
    matmul(x, w): every layer matrix goes through it; `w` is dense or, with load_model(packed=True),
    {"q": int8, "d": f32, "m": f32} Q4/Q8 blocks de-quantised in the graph.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from engine.config import ModelConfig
from engine.mesh import AXIS, constrain
from engine.weights import Params, load_weights

AttendFn = Callable[[jax.Array, jax.Array, jax.Array, Any, jax.Array], tuple[jax.Array, Any]]

LAYER_KEYS = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")


def default_dtype() -> jnp.dtype:
    """f32 on CPU (exact reference match, fast XLA:CPU kernels), bf16 on accelerators."""
    return jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16


class DecoderStack(nnx.Module):
    """All decoder layers' weights, stacked on a leading layer axis for `lax.scan`.

    A packed matrix (see engine.weights.load_gguf) is held as three Params `<key>_q/_d/_m`.
    """

    def __init__(self, layers: dict[str, Any], dtype: Any) -> None:
        self.packed = tuple(k for k in LAYER_KEYS if isinstance(layers[k], dict))
        for key in LAYER_KEYS:
            if key in self.packed:
                for part in ("q", "d", "m"):
                    arr = layers[key][part]
                    setattr(self, f"{key}_{part}", nnx.Param(jnp.asarray(arr, dtype=arr.dtype)))
            else:
                setattr(self, key, nnx.Param(jnp.asarray(layers[key], dtype=dtype)))

    def params(self) -> dict[str, Any]:
        return {k: ({p: getattr(self, f"{k}_{p}")[...] for p in ("q", "d", "m")} if k in self.packed
                    else getattr(self, k)[...]) for k in LAYER_KEYS}

    def rebind(self, layers: dict[str, Any]) -> None:
        for k in LAYER_KEYS:
            if k in self.packed:
                for p in ("q", "d", "m"):
                    getattr(self, f"{k}_{p}")[...] = layers[k][p]
            else:
                getattr(self, k)[...] = layers[k]


class Llama(nnx.Module):
    """Token embedding, `num_layers` pre-norm blocks (GQA attention + SwiGLU MLP), final norm, head."""

    def __init__(self, config: ModelConfig, weights: Params, dtype: Any) -> None:
        self.config = config
        self.embed = nnx.Param(jnp.asarray(weights["embed"], dtype=dtype))
        self.final_norm = nnx.Param(jnp.asarray(weights["final_norm"], dtype=dtype))
        self.lm_head = nnx.Param(jnp.asarray(weights["lm_head"], dtype=dtype)) if "lm_head" in weights else None
        self.layers = DecoderStack(weights["layers"], dtype)

    def params(self) -> Params:
        """The module's arrays as a plain pytree for jitted pure functions (no copies)."""
        p: Params = {
            "embed": self.embed[...],
            "final_norm": self.final_norm[...],
            "layers": self.layers.params(),
        }
        if self.lm_head is not None:
            p["lm_head"] = self.lm_head[...]
        return p

    def __call__(self, tokens: jax.Array, positions: jax.Array, cache: Any, attend: AttendFn) -> tuple[jax.Array, Any]:
        return forward(self.params(), self.config, tokens, positions, cache, attend)


# ----------------------------------------------------------------------------- the math

def rms_norm(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (y * w.astype(jnp.float32)).astype(x.dtype)


def rotary(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Rotate-half RoPE (the Hugging Face layout). x: [B,T,N,hd], positions: [B,T]."""
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B,T,hd/2]
    cos = jnp.cos(angles)[:, :, None, :]
    sin = jnp.sin(angles)[:, :, None, :]
    half = x.shape[-1] // 2
    x1 = x[..., :half].astype(jnp.float32)
    x2 = x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def gqa_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Softmax attention with grouped KV heads. q [B,T,H,hd], k/v [B,S,KV,hd], mask [B,T,S] (True = attend)."""
    b, t, h, hd = q.shape
    kv = k.shape[2]
    qg = q.reshape(b, t, kv, h // kv, hd)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32) * (hd ** -0.5)
    scores = jnp.where(mask[:, None, None, :, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v, preferred_element_type=jnp.float32)
    return out.reshape(b, t, h, hd).astype(q.dtype)


def matmul(x: jax.Array, w: Any) -> jax.Array:
    """x @ w for a dense matrix, or for a packed one {q int8 [in,out], d/m f32 [in/32,out]} de-quantised
    in the graph (XLA fuses it into the step; only the int8 codes are read from memory)."""
    if isinstance(w, dict):
        q, d, m = w["q"], w["d"], w["m"]
        d_in, d_out = q.shape
        dense = q.astype(jnp.float32).reshape(d_in // 32, 32, d_out) * d[:, None, :] + m[:, None, :]
        return x @ dense.reshape(d_in, d_out).astype(x.dtype)
    return x @ w


def embed(params: Params, tokens: jax.Array) -> jax.Array:
    return jnp.take(params["embed"], tokens, axis=0)


def decoder_layer(cfg: ModelConfig, lw: Params, h: jax.Array, positions: jax.Array, cache: Any,
                  layer: jax.Array, attend: AttendFn, inv_freq: jax.Array) -> tuple[jax.Array, Any]:
    """One pre-norm block: h + attn(norm(h)), then + SwiGLU(norm(h))."""
    b, t, _ = h.shape
    x = rms_norm(h, lw["attn_norm"], cfg.rms_norm_eps)
    q = matmul(x, lw["wq"]).reshape(b, t, cfg.num_heads, cfg.head_dim)
    k = matmul(x, lw["wk"]).reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    v = matmul(x, lw["wv"]).reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
    q = rotary(q, positions, inv_freq)
    k = rotary(k, positions, inv_freq)
    attn, cache = attend(q, k, v, cache, layer)
    h = h + matmul(attn.reshape(b, t, cfg.num_heads * cfg.head_dim), lw["wo"])
    x = rms_norm(h, lw["mlp_norm"], cfg.rms_norm_eps)
    inner = constrain(jax.nn.silu(matmul(x, lw["w_gate"])) * matmul(x, lw["w_up"]), None, None, AXIS)
    h = constrain(h + matmul(inner, lw["w_down"]), None, None, None)
    return h, cache


def decoder_layers(params: Params, cfg: ModelConfig, h: jax.Array, positions: jax.Array, cache: Any,
                   attend: AttendFn) -> tuple[jax.Array, Any]:
    """All layers under one `lax.scan` (compile time independent of depth); the cache rides in the carry."""
    inv_freq = jnp.asarray(cfg.inv_freq())

    def body(carry, xs):
        h, cache = carry
        lw, layer = xs
        return decoder_layer(cfg, lw, h, positions, cache, layer, attend, inv_freq), None

    (h, cache), _ = jax.lax.scan(body, (h, cache), (params["layers"], jnp.arange(cfg.num_layers, dtype=jnp.int32)))
    return h, cache


def final_logits(params: Params, cfg: ModelConfig, h: jax.Array) -> jax.Array:
    """Final RMSNorm and the output head (tied to the embedding when the checkpoint has none); f32 logits."""
    x = rms_norm(h, params["final_norm"], cfg.rms_norm_eps)
    if "lm_head" in params:
        return jnp.matmul(x, params["lm_head"], preferred_element_type=jnp.float32)
    return jnp.einsum("...d,vd->...v", x, params["embed"], preferred_element_type=jnp.float32)


def forward(params: Params, cfg: ModelConfig, tokens: jax.Array, positions: jax.Array, cache: Any,
            attend: AttendFn) -> tuple[jax.Array, Any]:
    h, cache = decoder_layers(params, cfg, embed(params, tokens), positions, cache, attend)
    return final_logits(params, cfg, h), cache


# ----------------------------------------------------------------------------- contiguous KV cache

def init_contiguous_cache(cfg: ModelConfig, batch: int, max_len: int, dtype: Any) -> dict[str, jax.Array]:
    shape = (cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


def contiguous_attention(positions: jax.Array) -> AttendFn:
    """KV write/read on a [L,B,S,KV,hd] cache: token at position p of row b lives in slot p.

    Causality is `slot <= query position`, so right-padded rows of unequal length need no extra mask:
    a padded token writes a slot that is masked until the real token at that position overwrites it.
    """

    def attend(q, k, v, cache, layer):
        b = q.shape[0]
        rows = jnp.arange(b)[:, None]
        ck = cache["k"].at[layer, rows, positions].set(k.astype(cache["k"].dtype), mode="drop")
        cv = cache["v"].at[layer, rows, positions].set(v.astype(cache["v"].dtype), mode="drop")
        keys, values = ck[layer], cv[layer]
        slots = jnp.arange(keys.shape[1])
        mask = slots[None, None, :] <= positions[:, :, None]
        return gqa_attention(q, keys, values, mask), {"k": ck, "v": cv}

    return attend


def no_cache_attention(positions: jax.Array) -> AttendFn:
    """Plain causal self-attention over the tokens of this call (no cache); for reference checks."""

    def attend(q, k, v, cache, layer):
        mask = positions[:, None, :] <= positions[:, :, None]
        return gqa_attention(q, k, v, mask), cache

    return attend


# ----------------------------------------------------------------------------- loading

@dataclasses.dataclass
class LoadedModel:
    config: ModelConfig
    module: Llama
    params: Params
    tokenizer: Any  # engine.tokenizer.Tokenizer
    dtype: Any
    path: Path
    mesh: Any = None


def load_model(path: str | Path | None = None, dtype: Any = None, mesh: Any = None,
               load_tokenizer: bool = True, packed: bool = False) -> LoadedModel:
    """Load weights (GGUF file or Hugging Face directory), build the module, and the tokenizer.

    `path=None` loads the bundled SmolLM2-135M-Instruct GGUF. `packed` keeps Q4_0/Q4_1/Q8_0 layer
    matrices in their block form (int8 codes + f32 block scales), de-quantised inside each step to the
    same values (a quarter of the weight bytes; measured on CPU it speeds up batch-1 decoding a
    little and slows large batches, so it is off by default). `mesh` (a jax.sharding.Mesh from
    engine.mesh) places the parameters tensor-parallel over its devices; otherwise one device.
    """
    from engine.assets import default_model_path
    from engine.tokenizer import load_tokenizer as _load_tok

    path = Path(path) if path is not None else default_model_path()
    dtype = jnp.dtype(dtype if dtype is not None else default_dtype())
    np_dtype = np.float32 if dtype == jnp.float32 else dtype  # numpy understands jnp.bfloat16 via ml_dtypes
    cfg, weights = load_weights(path, np_dtype, packed=bool(packed))
    module = Llama(cfg, weights, dtype)
    del weights
    params = module.params()
    if mesh is not None:
        from engine.mesh import shard_params

        params = shard_params(params, cfg, mesh)
        _rebind(module, params)
    tokenizer = _load_tok(path) if load_tokenizer else None
    return LoadedModel(config=cfg, module=module, params=params, tokenizer=tokenizer, dtype=dtype, path=path, mesh=mesh)


def _rebind(module: Llama, params: Params) -> None:
    """Point the module's Params at (sharded) arrays so module and pytree stay the same memory."""
    module.embed[...] = params["embed"]
    module.final_norm[...] = params["final_norm"]
    if module.lm_head is not None:
        module.lm_head[...] = params["lm_head"]
    module.layers.rebind(params["layers"])
