"""The Pallas decode kernels under a 4-device `tp` mesh (simulated CPU devices, which tests/conftest.py
sets up; make_mesh names the XLA flag if they are missing): shard_map over KV heads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from memloop.engine.attention.pallas import GATHER, AttentionBackend, decode_attention
from memloop.engine.model.mesh import AXIS, make_mesh, shard_cache, shard_params


def _pools(kvh: int, seed: int = 0):
    r = np.random.default_rng(seed)
    k, v = (jnp.asarray(r.standard_normal((kvh, 16, 4, 64)), jnp.float32) for _ in range(2))
    q = jnp.asarray(r.standard_normal((2, 2 * kvh, 64)), jnp.float32)
    return q, k, v, jnp.asarray([6, 16], jnp.int32), jnp.asarray([[3, 7, 0, 0], [1, 9, 2, 15]], jnp.int32)


@pytest.mark.parametrize(
    "kind,kvh",
    [
        ("pallas-gpu", 4),  # KV heads split one per device
        pytest.param("pallas-gpu", 3, marks=pytest.mark.slow),  # 3 do not divide 4: pools replicated
        pytest.param("pallas-tpu", 4, marks=pytest.mark.slow),
    ],
)
def test_kernel_per_device_over_kv_heads_equals_one_device(kind, kvh):
    q, k, v, lengths, tables = _pools(kvh)
    backend = AttentionBackend(kind, interpret=True)
    fn = jax.jit(lambda *a: decode_attention(backend, *a))
    single = np.asarray(fn(q, k, v, lengths, tables))
    mesh = make_mesh(4)
    split = kvh % 4 == 0
    with jax.set_mesh(mesh):
        ks, vs = (jax.device_put(x, NamedSharding(mesh, P(AXIS if split else None))) for x in (k, v))
        out = fn(q, ks, vs, lengths, tables)
    assert out.sharding.spec == (P(None, AXIS) if split else P())
    assert np.abs(np.asarray(out) - single).max() < 1e-6  # each device computes whole KV heads: same sums


@pytest.fixture(scope="module")
def tiny_kv4(tmp_path_factory):
    """A random Llama with 8 query and 4 KV heads (head_dim 16), so the KV heads split over 4 devices."""
    import torch
    from memloop.engine.model.decoder import load_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
    )
    path = tmp_path_factory.mktemp("tiny_kv4")
    LlamaForCausalLM(cfg).eval().save_pretrained(path, safe_serialization=True)
    return load_model(path, load_tokenizer=False, unroll=False)


def _decode(lm, params, backend, mesh=None, steps=3, kv_dtype=jnp.float32):
    """Prefill 5 tokens (gather path), then greedy decode `steps` tokens through `backend`."""
    from memloop.engine.cache.kv_pages import init_kv_pools
    from memloop.engine.runner.step import forward_paged

    cfg = lm.config
    cache = init_kv_pools(cfg, 8, 4, kv_dtype)
    if mesh is not None:
        cache = shard_cache(cache, cfg, mesh)
    table = jnp.asarray([[1, 2, 3, 4]], jnp.int32)
    step = jax.jit(
        lambda p, c, t, pos: forward_paged(
            cfg, p, c, t, pos, jnp.take(table[0], pos // 4), pos % 4, table, jnp.asarray([t.shape[1] - 1]), backend
        )
    )
    tokens = jnp.asarray([[3, 17, 99, 42, 5]], jnp.int32)
    pos = jnp.arange(5, dtype=jnp.int32)[None]
    out, logits = [], []
    for _ in range(steps + 1):
        lg, cache = step(params, cache, tokens, pos)
        logits.append(np.asarray(lg))
        tok = int(np.argmax(logits[-1][0]))
        out.append(tok)
        tokens = jnp.asarray([[tok]], jnp.int32)
        pos = pos[:, -1:] + 1
    return out, np.stack(logits)


@pytest.mark.slow
def test_tensor_parallel_decoding_through_the_kernel_equals_one_device(tiny_kv4):
    mesh = make_mesh(4)
    want, want_logits = _decode(tiny_kv4, tiny_kv4.params, GATHER)
    sharded = shard_params(tiny_kv4.params, tiny_kv4.config, mesh)
    with jax.set_mesh(mesh):
        got, got_logits = _decode(tiny_kv4, sharded, AttentionBackend("pallas-gpu", interpret=True), mesh)
    assert got == want
    assert np.abs(got_logits - want_logits).max() < 1e-4


def test_an_int8_cache_splits_its_scales_with_its_kv_heads_and_decodes_as_on_one_device(tiny_kv4):
    """The scales [L, KVH, pages, page_size] follow the pools' split on KV heads; a Pallas backend leaves
    int8 pools to the gather path, and the sharded decode equals the single-device one."""
    from memloop.engine.cache.kv_pages import init_kv_pools

    mesh = make_mesh(4)
    cache = shard_cache(init_kv_pools(tiny_kv4.config, 8, 4, jnp.int8), tiny_kv4.config, mesh)
    assert cache["k"].sharding.spec == P(None, AXIS, None, None, None)
    assert cache["k_scale"].sharding.spec == cache["v_scale"].sharding.spec == P(None, AXIS, None, None)
    want, want_logits = _decode(tiny_kv4, tiny_kv4.params, GATHER, kv_dtype=jnp.int8)
    sharded = shard_params(tiny_kv4.params, tiny_kv4.config, mesh)
    with jax.set_mesh(mesh):
        got, got_logits = _decode(
            tiny_kv4, sharded, AttentionBackend("pallas-gpu", interpret=True), mesh, kv_dtype=jnp.int8
        )
    assert got == want
    assert np.abs(got_logits - want_logits).max() < 1e-4
