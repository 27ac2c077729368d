"""JAX's Pallas paged-attention kernels (TPU, GPU) in interpret mode against the gather path, tiny shapes."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from memloop.engine.attention.paged import paged_attend
from memloop.engine.attention.pallas import (
    GATHER,
    IN_PLACE,
    AttentionBackend,
    AttentionBackendError,
    kernel_attend,
    pages_per_block,
    resolve_backend,
)

KVH, H, HD, PAGES, PS = 2, 6, 64, 16, 4  # 3 query heads per KV head, like SmolLM2's grouping


def _case(dtype, seed=0):
    """A pool with random keys/values, three rows of different lengths (one padded row), new tokens."""
    r = np.random.default_rng(seed)
    pool = {n: jnp.asarray(r.standard_normal((KVH, PAGES, PS, HD)), dtype) for n in ("k", "v")}
    tables = np.zeros((4, 4), np.int32)
    tables[0, :2] = [3, 7]  # 6 keys: pages 3 and 7
    tables[1, :4] = [1, 9, 2, 15]  # 16 keys: the whole table
    tables[2, :1] = [11]  # 1 key: its own
    positions = np.asarray([[5], [15], [0], [0]], np.int32)  # row 3 is padding (scratch page 0)
    slot_pages = np.take_along_axis(tables, positions // PS, axis=1)
    slot_offsets = positions % PS
    q = jnp.asarray(r.standard_normal((4, 1, H, HD)), dtype)
    k = jnp.asarray(r.standard_normal((4, 1, KVH, HD)), dtype)
    v = jnp.asarray(r.standard_normal((4, 1, KVH, HD)), dtype)
    return pool, [jnp.asarray(x) for x in (slot_pages, slot_offsets, tables, positions)], (q, k, v)


@pytest.mark.parametrize(
    "kind,dtype",
    [
        ("pallas-tpu", jnp.bfloat16),
        ("pallas-gpu", jnp.float32),  # ~8 s each in the interpreter
        pytest.param("pallas-tpu", jnp.float32, marks=pytest.mark.slow),
        pytest.param("pallas-gpu", jnp.bfloat16, marks=pytest.mark.slow),
    ],
)
def test_kernel_matches_gather_path(kind, dtype):
    """The decode call writes the same pages and attends to the same values as the gather path."""
    pool, (slot_pages, slot_offsets, tables, positions), (q, k, v) = _case(dtype)
    gather = paged_attend(slot_pages, slot_offsets, tables, positions)
    kernel = kernel_attend(gather, AttentionBackend(kind, interpret=True), slot_pages, slot_offsets, tables, positions)
    want, want_cache = jax.jit(lambda c: gather(q, k, v, c, 0))({"k": [pool["k"]], "v": [pool["v"]]})
    got, got_cache = jax.jit(lambda c: kernel(q, k, v, c, 0))({"k": [pool["k"]], "v": [pool["v"]]})
    assert got.shape == want.shape == (4, 1, H, HD) and got.dtype == want.dtype
    for name in ("k", "v"):
        assert np.array_equal(np.asarray(got_cache[name][0]), np.asarray(want_cache[name][0]))
    # the TPU kernel loads K/V as bf16 whatever the pool holds, so f32 agrees to bf16 precision
    tol = 1e-4 if (dtype == jnp.float32 and kind == "pallas-gpu") else 3e-2
    diff = np.abs(np.asarray(got[:3], np.float32) - np.asarray(want[:3], np.float32)).max()
    assert diff < tol, diff
    # each row's answer depends on its own keys: row 0 differs from what row 1 sees
    assert np.abs(np.asarray(got[0], np.float32) - np.asarray(got[1], np.float32)).max() > 0.1


def test_kernel_calls_with_options_or_prefill_use_the_gather_path(caplog):
    """A sliding window (or soft-capping, any option) and prefill chunks are the gather path's, by name."""
    pool, (slot_pages, slot_offsets, tables, positions), (q, k, v) = _case(jnp.float32)
    calls = []

    def spy(q, k, v, cache, layer, **options):  # records the routing; the gather path is checked above
        calls.append(options)
        return q, cache

    kernel = kernel_attend(
        spy, AttentionBackend("pallas-gpu", interpret=True), slot_pages, slot_offsets, tables, positions
    )
    cache = {"k": [pool["k"]], "v": [pool["v"]]}
    with caplog.at_level(logging.INFO, logger="memloop.engine.attention.pallas"):
        kernel(q, k, v, cache, 0, window=3)
        kernel(jnp.concatenate([q, q], 1), jnp.concatenate([k, k], 1), jnp.concatenate([v, v], 1), cache, 0)
    assert calls == [{"window": 3}, {}]
    assert "pallas-gpu: layers with window use the gather path" in caplog.text
    assert "prefill chunks" in caplog.text


def test_backend_resolution_by_platform():
    # auto on CPU: the gather path with decode read in place by the C++ kernel; gather: no kernel at all
    assert resolve_backend("auto", on="cpu") == IN_PLACE and IN_PLACE.in_place and not IN_PLACE.kernel
    assert resolve_backend("gather", on="cpu") == GATHER and not GATHER.in_place
    assert resolve_backend("auto", on="tpu").kind == "pallas-tpu"
    assert resolve_backend("auto", on="gpu").kind == "pallas-gpu"
    assert resolve_backend(None, on="gpu").kind == "pallas-gpu"
    assert resolve_backend("gather", on="tpu").kind == "gather"
    assert resolve_backend("pallas-tpu", on="tpu") == AttentionBackend("pallas-tpu", False)
    assert resolve_backend("pallas-gpu", interpret=True, on="cpu") == AttentionBackend("pallas-gpu", True)


@pytest.mark.parametrize(
    "requested,on,interpret,says",
    [
        ("pallas-tpu", "cpu", False, "TPU kernel and this process runs on 'cpu'"),
        ("pallas-gpu", "tpu", False, "GPU kernel and this process runs on 'tpu'"),
        ("auto", "cpu", True, "set `attention` to pallas-tpu or pallas-gpu"),
        ("flash", "cpu", False, "must be one of"),
    ],
)
def test_a_kernel_the_platform_cannot_run_is_a_named_error(requested, on, interpret, says):
    with pytest.raises(AttentionBackendError, match=says.replace("`", ".").replace("(", ".").replace(")", ".")):
        resolve_backend(requested, interpret=interpret, on=on)


def test_pages_per_block_divides_the_block_table():
    assert pages_per_block(8, 32) == 8 and pages_per_block(64, 8) == 8 and pages_per_block(12, 8) == 6
    assert pages_per_block(7, 4) == 1
