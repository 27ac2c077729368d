"""The paged attention hooks the jitted step (`memloop.engine.runner.step`) plugs into the model's layers.

`paged_attend` writes a call's new keys/values into their pages and attends over each row's pages
gathered through its block table (the reference path, every backend's fallback); `in_place_attend`
computes the same attention with memloop's CPU kernel reading the pages where they are. The Pallas
kernels of TPU/GPU are `memloop.engine.attention.pallas`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from memloop.engine.cache.kv_pages import read_pages, write_pages
from memloop.engine.model.decoder import AttendFn, causal_mask, gqa_attention


def paged_attend(
    slot_pages: jax.Array, slot_offsets: jax.Array, block_tables: jax.Array, positions: jax.Array
) -> AttendFn:
    """The model's attention hook over a paged cache {"k", "v"}: [layers, KVH, pages, page_size, hd]
    (or a per-layer list of [KVH, pages, page_size, hd]).

    New keys/values are written first (token i of row b goes to page slot_pages[b, i], offset
    slot_offsets[b, i]; padding goes to the scratch page), so a token attends to itself and to its
    chunk neighbours. Each row then gathers its pages in block-table order, so key index j of the
    gathered run is absolute position j and causality is `j <= query position` (and, with a sliding
    window, `j > query position - window`; the window is per layer for Gemma's interleaved local and
    global layers, and `softcap` soft-caps the scores where the model has it, Gemma 2); gathered slots
    past a row's length (padding pages) always sit beyond its positions. This gather + `gqa_attention`
    is the reference; calls go through a kernel instead where the backend has one (`in_place_attend`
    on CPU, every call; `memloop.engine.attention.pallas.kernel_attend` on TPU/GPU, decode calls).
    """

    def attend(q, k, v, cache, layer, window=None, softcap=None):
        cache = write_pages(cache, layer, slot_pages, slot_offsets, k, v)
        keys, values = read_pages(cache, layer, block_tables, q.dtype)
        mask = causal_mask(jnp.arange(keys.shape[2]), positions, window)
        return gqa_attention(q, keys, values, mask, softcap), cache

    return attend


def in_place_attend(
    gather: AttendFn, slot_pages: jax.Array, slot_offsets: jax.Array, block_tables: jax.Array, positions: jax.Array
) -> AttendFn:
    """`gather`'s attention computed by the CPU kernel that reads each row's pages in place
    (memloop.engine.kernels.attention), for the layers it supports: per-layer pools (the unrolled CPU
    layout), f32 queries, no attention option besides a static window. Any other layer is `gather`'s."""
    from memloop.engine.kernels.attention import paged_attention, supports

    def attend(q, k, v, cache, layer, **options):
        window = options.pop("window", None)
        pools = cache["k"]
        if (
            not isinstance(pools, (list, tuple))
            or not isinstance(layer, int)
            or not supports(q, pools[layer], window, options)
        ):
            return gather(q, k, v, cache, layer, **({"window": window} if window is not None else {}), **options)
        cache = write_pages(cache, layer, slot_pages, slot_offsets, k, v)
        out = paged_attention(
            q,
            cache["k"][layer],
            cache["v"][layer],
            block_tables,
            positions,
            window,
            *(cache[s][layer] for s in ("k_scale", "v_scale") if s in cache),
        )
        return out.astype(q.dtype), cache

    return attend
