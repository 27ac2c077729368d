"""The TPU `ragged_paged_attention` layout, checked against its own reference on CPU (the decision record).

`ragged_paged_attention` (mixed prefill and decode) wants pages `[pages, page_size, 2 x KV heads, hd]`
with each KV head's keys and values interleaved (k0, v0, k1, v1, ...). memloop's pools are two
KV-head-major arrays `[KV heads, pages, page_size, hd]` (the decode kernels' and the gather path's
layout). This test converts a pool into the ragged layout (a copy, here only) and shows that the
kernel's reference over it, with memloop's block tables, key lengths and query offsets, computes the
gather path's attention for a batch of one prefill chunk and two decode rows: the layouts hold the
same cache, but using the kernel would need that second copy (or the whole engine on the interleaved
layout), so TPU prefill keeps the gather path (docs/engine-attention.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ref_ragged_paged_attention
from memloop.engine.attention.paged import paged_attend

KVH, H, HD, PAGES, PS = 2, 6, 64, 16, 4


def _ragged_pages(k_pool, v_pool):
    """[KVH, P, ps, hd] x 2 -> [P, ps, 2*KVH, hd], heads interleaved k0, v0, k1, v1."""
    both = jnp.stack([k_pool, v_pool], axis=1)  # [KVH, 2, P, ps, hd]
    return both.reshape(2 * KVH, PAGES, PS, HD).transpose(1, 2, 0, 3)


def test_ragged_reference_over_the_converted_pool_equals_the_gather_path():
    r = np.random.default_rng(1)
    k_pool, v_pool = (jnp.asarray(r.standard_normal((KVH, PAGES, PS, HD)), jnp.float32) for _ in range(2))
    tables = jnp.asarray([[1, 2, 3, 0], [4, 5, 0, 0], [6, 7, 8, 9]], jnp.int32)
    # row 0: a prefill chunk of 4 tokens at positions 6..9; rows 1, 2: one decode token each (padded to 4)
    positions = np.asarray([[6, 7, 8, 9], [7, 0, 0, 0], [12, 0, 0, 0]], np.int32)
    lengths = np.asarray([4, 1, 1])
    t = positions.shape[1]
    valid = np.arange(t)[None] < lengths[:, None]
    slot_pages = np.where(valid, np.take_along_axis(np.asarray(tables), positions // PS, 1), 0)
    slot_offsets = np.where(valid, positions % PS, 0)
    q = jnp.asarray(r.standard_normal((3, t, H, HD)), jnp.float32)
    k = jnp.asarray(r.standard_normal((3, t, KVH, HD)), jnp.float32)
    v = jnp.asarray(r.standard_normal((3, t, KVH, HD)), jnp.float32)

    gather = paged_attend(jnp.asarray(slot_pages), jnp.asarray(slot_offsets), tables, jnp.asarray(positions))
    want, cache = jax.jit(lambda c: gather(q, k, v, c, 0))({"k": [k_pool], "v": [v_pool]})

    kv_pages = _ragged_pages(cache["k"][0], cache["v"][0])  # after the step's own writes
    queries = jnp.concatenate([q[i, :n] for i, n in enumerate(lengths)])  # [6 tokens, H, hd]
    kv_lens = jnp.asarray(positions[np.arange(3), lengths - 1] + 1, jnp.int32)  # keys 0..last position
    cu_q_lens = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]), jnp.int32)
    got = ref_ragged_paged_attention(
        queries, kv_pages, kv_lens, tables, cu_q_lens, jnp.asarray([3], jnp.int32), sm_scale=HD**-0.5
    )
    expect = jnp.concatenate([want[i, :n] for i, n in enumerate(lengths)])
    assert got.shape == expect.shape == (6, H, HD)
    assert np.abs(np.asarray(got) - np.asarray(expect)).max() < 1e-4
    # the interleaving matters: reading the pools as [k0, k1, v0, v1] gives other answers
    wrong = jnp.concatenate([cache["k"][0], cache["v"][0]]).transpose(1, 2, 0, 3)
    bad = ref_ragged_paged_attention(
        queries, wrong, kv_lens, tables, cu_q_lens, jnp.asarray([3], jnp.int32), sm_scale=HD**-0.5
    )
    assert np.abs(np.asarray(bad) - np.asarray(expect)).max() > 0.1
