"""One jitted engine step: a Llama forward pass that reads and writes a paged KV cache, then samples.

The step takes a padded [batch, tokens] block of new tokens (decode rows have one token, a prefill
row a chunk of its prompt), writes their keys/values into their pages, gathers each row's pages
through its block table, attends, and samples the next token of every row with per-row settings and
the grammar bitmask applied -- all inside one XLA program, compiled once per power-of-two bucket.

It runs over the stacked parameter layout of `engine.weights` (every per-layer tensor carries a
leading layer axis) through the model's own `decoder_layers`/`final_logits`, plugging in a paged
attention hook (`paged_attend`), which is the single call site a Pallas ragged paged-attention
kernel replaces on TPU.
"""
from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from engine.config import ModelConfig
from engine.constrained import unpack_bitmask
from engine.model import AttendFn, decoder_layers, embed, final_logits, gqa_attention



def init_kv_pools(cfg: ModelConfig, num_pages: int, page_size: int, dtype: Any) -> dict[str, jax.Array]:
    shape = (cfg.num_layers, num_pages, page_size, cfg.num_kv_heads, cfg.head_dim)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


def paged_attend(slot_pages: jax.Array, slot_offsets: jax.Array, block_tables: jax.Array,
                 positions: jax.Array) -> AttendFn:
    """The model's attention hook over a paged cache {"k", "v"}: [layers, pages, page_size, KVH, hd].

    New keys/values are written first (token i of row b goes to page slot_pages[b, i], offset
    slot_offsets[b, i]; padding goes to the scratch page), so a token attends to itself and to its
    chunk neighbours. Each row then gathers its pages in block-table order, so key index j of the
    gathered run is absolute position j and causality is `j <= query position`; gathered slots past
    a row's length (padding pages) always sit beyond its positions. This gather + `gqa_attention`
    is the single call site a Pallas ragged paged-attention kernel replaces on TPU.
    """

    def attend(q, k, v, cache, layer):
        kp = cache["k"].at[layer, slot_pages, slot_offsets].set(k.astype(cache["k"].dtype))
        vp = cache["v"].at[layer, slot_pages, slot_offsets].set(v.astype(cache["v"].dtype))
        b, _, kvh, hd = k.shape
        keys = kp[layer][block_tables].reshape(b, -1, kvh, hd)
        values = vp[layer][block_tables].reshape(b, -1, kvh, hd)
        mask = jnp.arange(keys.shape[1])[None, None, :] <= positions[:, :, None]
        return gqa_attention(q, keys, values, mask), {"k": kp, "v": vp}

    return attend


def forward_paged(cfg: ModelConfig, params: dict[str, Any], cache: dict[str, jax.Array], tokens: jax.Array,
                  positions: jax.Array, slot_pages: jax.Array, slot_offsets: jax.Array,
                  block_tables: jax.Array, last_index: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The model's own layers over the paged cache; logits [B, V] of each row's `last_index` token."""
    attend = paged_attend(slot_pages, slot_offsets, block_tables, positions)
    h, cache = decoder_layers(params, cfg, embed(params, tokens), positions, cache, attend)
    last = jnp.take_along_axis(h, last_index[:, None, None], axis=1)[:, 0]  # [B, D]
    return final_logits(params, cfg, last), cache


def sample_batch(logits: jax.Array, bitmask: jax.Array, temperature: jax.Array, top_k: jax.Array,
                 top_p: jax.Array, keys: jax.Array) -> jax.Array:
    """Next token per row: grammar mask, then greedy (temperature 0) or temperature/top-k/top-p sampling."""
    v = logits.shape[-1]
    allowed = unpack_bitmask(bitmask, v)
    logits = jnp.where(allowed, logits, -jnp.inf)
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def sampled(_: None) -> jax.Array:
        scaled = logits / jnp.maximum(temperature, 1e-6)[:, None]
        srt = jnp.sort(scaled, axis=-1)[:, ::-1]
        k = jnp.where(top_k > 0, jnp.minimum(top_k, v), v)
        kth = jnp.take_along_axis(srt, (k - 1)[:, None], axis=-1)
        scaled = jnp.where(scaled < kth, -jnp.inf, scaled)
        srt = jnp.where(jnp.arange(v)[None, :] < k[:, None], srt, -jnp.inf)
        probs = jax.nn.softmax(srt, axis=-1)
        cum = jnp.cumsum(probs, axis=-1) - probs  # mass strictly before each sorted token
        keep = cum < top_p[:, None]
        cutoff = jnp.min(jnp.where(keep, srt, jnp.inf), axis=-1, keepdims=True)
        scaled = jnp.where(scaled < cutoff, -jnp.inf, scaled)
        drawn = jax.vmap(jax.random.categorical)(keys, scaled).astype(jnp.int32)
        return jnp.where(temperature > 0, drawn, greedy)

    return jax.lax.cond(jnp.any(temperature > 0), sampled, lambda _: greedy, None)


@partial(jax.jit, static_argnums=(0,), donate_argnums=(2,))
def engine_step(cfg: ModelConfig, params: dict[str, Any], cache: dict[str, jax.Array], tokens: jax.Array,
                positions: jax.Array, slot_pages: jax.Array, slot_offsets: jax.Array, block_tables: jax.Array,
                last_index: jax.Array, bitmask: jax.Array, temperature: jax.Array, top_k: jax.Array,
                top_p: jax.Array, keys: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Forward + sample in one program; the KV cache is donated and updated in place."""
    logits, cache = forward_paged(cfg, params, cache, tokens, positions, slot_pages, slot_offsets,
                                  block_tables, last_index)
    return sample_batch(logits, bitmask, temperature, top_k, top_p, keys), cache
