"""A paged KV cache's pools, writing new keys/values into them and reading a row's pages back, for every
cache type.

A cache is `{"k", "v"}` pools (`init_kv_pools`), of a float type, or of int8 codes with
`{"k_scale", "v_scale"}` beside them: one f32 scale per (token, KV head), shaped like the pools
without the head-dim axis. The int8 type is llama.cpp's `q8_0` cache idea at the granularity of one
head's vector: symmetric, `code = round(x * 127 / max|x|)`, so a cached token costs hd + 4 bytes per
head instead of 4 hd (f32) or 2 hd (f16). At long context a decode step is bound by the bytes of keys
and values it reads (docs/bench-log.md), which is what this buys back; the price is a relative
error of at most 1/254 of the vector's largest element per element.

Every attention path (the gather reference, the CPU kernel, the Pallas kernels) writes through
`write_pages`, so a token's cached numbers are the same whichever path wrote them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from memloop.engine.model.config import ModelConfig
from memloop.engine.model.decoder import cache_set, init_layer_cache, kv_major

INT8 = jnp.dtype(jnp.int8)
QMAX = 127.0
SCALES = {"k": "k_scale", "v": "v_scale"}


def init_kv_pools(
    cfg: ModelConfig, num_pages: int, page_size: int, dtype: Any, per_layer: bool = False
) -> dict[str, Any]:
    """Page pools [L, KVH, pages, page_size, hd] (KV-head-major like every cache, so a gathered run of
    pages is already in attention layout), or a list of [KVH, pages, page_size, hd] per layer
    (matching unrolled weights, see memloop.engine.model.decoder.init_layer_cache). An int8 cache also keeps f32
    scales [.., KVH, pages, page_size], one per cached token and KV head (below)."""
    shape = (cfg.num_kv_heads, num_pages, page_size, cfg.head_dim)
    cache = init_layer_cache(cfg, shape, dtype, per_layer)
    if jnp.dtype(dtype) == INT8:
        scales = init_layer_cache(cfg, shape[:-1], jnp.float32, per_layer)
        cache.update(k_scale=scales["k"], v_scale=scales["v"])
    return cache


def is_quantized(cache: dict[str, Any]) -> bool:
    """The cache keeps int8 codes with per-(token, head) scales."""
    return "k_scale" in cache


def quantize(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """x [..., hd] float -> (int8 codes [..., hd], f32 scales [...]) with x ~= codes * scale.

    A zero vector gets scale 0 and codes 0 (no division by zero)."""
    x = x.astype(jnp.float32)
    amax = jnp.max(jnp.abs(x), axis=-1)
    scale = amax / QMAX
    inv = jnp.where(amax > 0, QMAX / jnp.where(amax > 0, amax, 1.0), 0.0)
    codes = jnp.clip(jnp.round(x * inv[..., None]), -QMAX, QMAX).astype(INT8)
    return codes, scale


def dequantize(codes: jax.Array, scale: jax.Array, dtype: Any) -> jax.Array:
    return (codes.astype(jnp.float32) * scale[..., None]).astype(dtype)


def write_pages(
    cache: dict[str, Any], layer: Any, slot_pages: jax.Array, slot_offsets: jax.Array, k: jax.Array, v: jax.Array
) -> dict[str, Any]:
    """The cache with token i of row b's key/value [B,T,KVH,hd] at page slot_pages[b, i], offset
    slot_offsets[b, i] of `layer` (padding slots name the scratch page)."""
    kvh = k.shape[2]
    index = (jnp.arange(kvh)[:, None, None], slot_pages[None], slot_offsets[None])
    out = dict(cache)
    for name, x in (("k", k), ("v", v)):
        x = kv_major(x)
        if is_quantized(cache):
            codes, scale = quantize(x)
            out[name] = cache_set(cache[name], layer, index, codes)
            out[SCALES[name]] = cache_set(cache[SCALES[name]], layer, index, scale)
        else:
            out[name] = cache_set(cache[name], layer, index, x)
    return out


def read_pages(cache: dict[str, Any], layer: Any, block_tables: jax.Array, dtype: Any) -> tuple[jax.Array, jax.Array]:
    """Each row's pages of `layer` in block-table order as dense keys and values [KVH, B, S, hd] of `dtype`."""
    b = block_tables.shape[0]

    def run(name: str) -> jax.Array:
        pool = cache[name][layer]
        kvh, hd = pool.shape[0], pool.shape[-1]
        x = pool[:, block_tables].reshape(kvh, b, -1, hd)
        if is_quantized(cache):
            return dequantize(x, cache[SCALES[name]][layer][:, block_tables].reshape(kvh, b, -1), dtype)
        return x.astype(dtype)  # a no-op unless the cache's type differs

    return run("k"), run("v")
