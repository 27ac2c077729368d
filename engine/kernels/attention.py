"""Paged attention read in place (paged_attention.cc), and when the engine may use it.

`paged_attention(q, k_pages, v_pages, block_tables, positions, window)` gives the same result as
gathering each row's pages into a dense run and calling `memloop.engine.model.decoder.gqa_attention` with the causal
(sliding-window) mask, up to f32 rounding, without the copy: per decode step it reads the bytes of the
row's keys and values once; a prefill chunk (several query tokens per row) takes a tiled form that
widens each key once for 32 tokens' query rows. A query's numbers do not depend on its batch or on
the other tokens of its call; they differ between a one-token call and a longer one by f32 rounding
(see the .cc file).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from memloop.engine import kernels

MAX_HEAD_DIM = 256
# Model families whose attention is exactly what the kernel computes (softmax of q.k / sqrt(head_dim),
# causal, optionally windowed). A family that changes that math (logit soft-capping, another query
# scale) is served by the gather path until it is added here with a test against it.
ARCHITECTURES = frozenset({"llama", "qwen2", "qwen3", "mistral"})


def paged_attention(
    q: Any,
    k_pages: Any,
    v_pages: Any,
    block_tables: Any,
    positions: Any,
    window: int | None = None,
    k_scale: Any = None,
    v_scale: Any = None,
) -> Any:
    """q [B,T,H,hd] f32 (rotary applied); k/v pages [KVH, pages, page_size, hd] f32, f16, or int8 codes
    with `k_scale`/`v_scale` [KVH, pages, page_size] f32 (memloop.engine.cache.kv_pages) (this layer's pool, already
    holding the new tokens); block_tables [B, table_pages]; positions [B,T] (each query's absolute
    position, which is also its key's slot in the row's run of pages). -> [B,T,H,hd] f32.
    Call inside or outside jit on the CPU backend (raises KernelBuildError where the kernels cannot build)."""
    import jax
    import jax.numpy as jnp

    kernels.load()

    scales: tuple[Any, ...] = ()
    suffix = {jnp.dtype(jnp.float16): "_f16", jnp.dtype(jnp.int8): "_q8"}.get(jnp.dtype(k_pages.dtype), "")
    if suffix == "_q8":
        if k_scale is None or v_scale is None:
            raise ValueError("int8 KV pages need their k_scale and v_scale arrays")
        scales = (k_scale.astype(jnp.float32), v_scale.astype(jnp.float32))
    call = jax.ffi.ffi_call(kernels.ATTENTION_TARGET + suffix, jax.ShapeDtypeStruct(q.shape, jnp.float32))
    return call(
        q.astype(jnp.float32),
        k_pages,
        v_pages,
        *scales,
        block_tables.astype(jnp.int32),
        positions.astype(jnp.int32),
        window=np.int32(window or 0),
    )


def enabled() -> bool:
    """The kernel may be traced into a step: the CPU backend, kernels built here, no mesh around the
    trace (the custom call is not partitioned), and not turned off with MEMLOOP_PAGED_KERNEL=0."""
    import jax

    if os.environ.get("MEMLOOP_PAGED_KERNEL", "1") == "0" or jax.default_backend() != "cpu":
        return False
    if not jax.sharding.get_abstract_mesh().empty:
        return False
    return kernels.available()


def config_supported(cfg: Any) -> bool:
    """The model's attention math is the kernel's (see ARCHITECTURES)."""
    return getattr(cfg, "architecture", None) in ARCHITECTURES


def supports(q: Any, pool: Any, window: Any, extra: dict[str, Any]) -> bool:
    """This layer's attention is one the kernel computes: f32 queries, an f32, f16 or int8 pool, a head size it tiles,
    a static window (or none), and no other attention option (e.g. logit soft-capping), which the
    gather path keeps serving."""
    import jax.numpy as jnp

    hd = q.shape[-1]
    return (
        not extra
        and (window is None or isinstance(window, int))
        and q.dtype == jnp.float32
        and pool.dtype in (jnp.float32, jnp.float16, jnp.int8)
        and pool.ndim == 4
        and hd % 16 == 0
        and hd <= MAX_HEAD_DIM
    )
