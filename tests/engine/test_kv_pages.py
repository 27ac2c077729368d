"""Page writes and reads of the paged KV cache (memloop.engine.cache.kv_pages): float pools keep what is written;
an int8 cache keeps codes and a scale per (token, KV head) within half a step of every element, and
reads back the de-quantised numbers in block-table order."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from memloop.engine.cache.kv_cache import KVLayout
from memloop.engine.cache.kv_pages import dequantize, is_quantized, quantize, read_pages, write_pages


def test_int8_codes_are_within_half_a_step_of_every_element():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 7, 64)).astype(np.float32) * rng.uniform(0.01, 50, (3, 5, 7, 1)).astype(np.float32)
    codes, scale = quantize(jnp.asarray(x))
    assert codes.dtype == jnp.int8 and scale.shape == x.shape[:-1] and scale.dtype == jnp.float32
    back = np.asarray(dequantize(codes, scale, jnp.float32))
    step = np.abs(x).max(-1, keepdims=True) / 127
    assert np.all(np.abs(back - x) <= 0.5 * step * (1 + 1e-5))
    assert np.abs(np.asarray(codes)).max(-1).min() == 127  # the largest element of every vector uses the full range


def test_a_zero_vector_has_zero_codes_and_scale():
    codes, scale = quantize(jnp.zeros((2, 64)))
    assert not np.asarray(codes).any() and not np.asarray(scale).any()
    assert not np.isnan(np.asarray(dequantize(codes, scale, jnp.float32))).any()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int8])
def test_written_tokens_read_back_in_block_table_order(lm, dtype):
    """Two rows write 3 tokens each into pages 2..5 (page size 2) of the bundled model's pools; reading
    through the block tables gives each row its tokens at their positions (int8: de-quantised)."""
    from memloop.engine.cache.kv_pages import init_kv_pools

    cfg = lm.config
    cache = init_kv_pools(cfg, 6, 2, dtype, per_layer=True)
    assert is_quantized(cache) == (dtype == jnp.int8)
    rng = np.random.default_rng(1)
    k = jnp.asarray(rng.standard_normal((2, 3, cfg.num_kv_heads, cfg.head_dim)), jnp.float32)
    v = k * 2
    pages = jnp.asarray([[2, 2, 3], [4, 4, 5]])
    offsets = jnp.asarray([[0, 1, 0], [0, 1, 0]])
    cache = write_pages(cache, 1, pages, offsets, k, v)
    keys, values = read_pages(cache, 1, jnp.asarray([[2, 3], [4, 5]]), jnp.float32)
    assert keys.shape == (cfg.num_kv_heads, 2, 4, cfg.head_dim)
    want = np.asarray(k.transpose(2, 0, 1, 3))
    tol = 0 if dtype == jnp.float32 else np.abs(want).max() / 254 * 1.0001
    np.testing.assert_allclose(np.asarray(keys)[:, :, :3], want, atol=tol, rtol=0)
    np.testing.assert_allclose(np.asarray(values)[:, :, :3], 2 * want, atol=2 * tol, rtol=0)
    untouched, _ = read_pages(cache, 0, jnp.asarray([[2, 3]]), jnp.float32)
    assert not np.asarray(untouched).any()


def test_an_int8_page_costs_its_codes_and_scales():
    f32 = KVLayout(layers=30, kv_heads=3, head_dim=64, page_size=16, dtype_bytes=4)
    q8 = KVLayout(layers=30, kv_heads=3, head_dim=64, page_size=16, dtype_bytes=1, scale_bytes=4)
    assert q8.page_bytes == 2 * 30 * 16 * 3 * (64 + 4)
    assert f32.page_bytes / q8.page_bytes == pytest.approx(256 / 68)
