"""The CPU kernel that attends over a paged KV cache in place (engine/kernels/paged_attention.cc).

It must give the gather path's numbers up to f32 rounding (for every page size, head layout, query
count and sliding window it accepts), give a query the same bits whatever shares its batch, and be
what the engine's decode steps and prefill chunks run, with the gather path kept for what it does not serve.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from memloop.engine.cache.kv_pages import quantize, read_pages
from memloop.engine.model.decoder import causal_mask, gqa_attention

from tests.engine.kernel_gate import needs_kernels

pytestmark = needs_kernels


def make_case(
    seed: int,
    kvh: int,
    heads: int,
    hd: int,
    page_size: int,
    pages: int,
    positions: list[list[int]],
    kv_dtype: type = np.float32,
):
    """Random pools (of `kv_dtype`) and queries; each row's block table a random distinct choice of pages."""
    rng = np.random.default_rng(seed)
    b = len(positions)
    table_pages = max(max(p) for p in positions) // page_size + 1 + 2  # two padding pages past the longest
    k = rng.standard_normal((kvh, pages, page_size, hd)).astype(kv_dtype)
    v = rng.standard_normal((kvh, pages, page_size, hd)).astype(kv_dtype)
    tables = np.stack([rng.permutation(pages)[:table_pages] for _ in range(b)]).astype(np.int32)
    q = (rng.standard_normal((b, len(positions[0]), heads, hd)) * 2).astype(np.float32)
    return q, k, v, tables, np.asarray(positions, np.int32)


def pools(k, v, kv_dtype) -> dict:
    """The layer's cache as the engine keeps it: float pools, or int8 codes and their scales."""
    if kv_dtype != np.int8:
        return {"k": [jnp.asarray(k)], "v": [jnp.asarray(v)]}
    (kc, ks), (vc, vs) = quantize(jnp.asarray(k)), quantize(jnp.asarray(v))
    return {"k": [kc], "v": [vc], "k_scale": [ks], "v_scale": [vs]}


def kernel(cache: dict, q, tables, positions, window=None):
    """The kernel over layer 0 of `cache`, jitted."""
    from memloop.engine.kernels.attention import paged_attention

    scales = [cache[s][0] for s in ("k_scale", "v_scale") if s in cache]
    fn = jax.jit(lambda q, k, v, t, p, *sc: paged_attention(q, k, v, t, p, window, *sc))
    return np.asarray(fn(q, cache["k"][0], cache["v"][0], tables, positions, *scales))


def gathered(q, cache: dict, tables, positions, window=None):
    """The engine's gather path: each row's pages copied into one run (de-quantised), then `gqa_attention`."""
    keys, values = read_pages(cache, 0, jnp.asarray(tables), jnp.float32)
    mask = causal_mask(jnp.arange(keys.shape[2]), jnp.asarray(positions), window)
    return np.asarray(gqa_attention(jnp.asarray(q), keys, values, mask))


CASES = [  # kv heads, query heads, head dim, page size, positions per row (tokens of each row)
    (3, 9, 64, 16, [[700], [5], [255], [256]]),  # SmolLM2's layout, decode, chunk edges
    (2, 14, 64, 16, [[1030], [40]]),  # Qwen2.5-0.5B's layout (7 query heads per KV head)
    (4, 4, 128, 5, [[3, 4, 5, 6], [300, 301, 302, 303]]),  # odd page size, a prefill chunk, no grouping
    (1, 8, 32, 16, [[511, 512, 513], [0, 1, 2]]),  # one KV head, prefill from the very first token
    # a prefill chunk across a key chunk's edge (256) and the tiled form's work items (32 tokens),
    # 7 query heads per KV head (rows not a multiple of the row block)
    (2, 14, 64, 16, [list(range(240, 280)), list(range(0, 40))]),
    # decode at head dims whose values are not whole 64-wide spans (the value pass's remainders)
    (2, 4, 32, 16, [[100], [300]]),
    (1, 2, 80, 16, [[290], [17]]),
    (2, 4, 128, 16, [[260]]),
]


@pytest.mark.parametrize("kv_dtype", [np.float32, np.float16, np.int8])
@pytest.mark.parametrize("window", [None, 37])
@pytest.mark.parametrize("kvh,heads,hd,page_size,positions", CASES)
def test_kernel_matches_the_gather_path(kvh, heads, hd, page_size, positions, window, kv_dtype):
    """f16 pools are widened exactly and int8 codes scaled per key, so every cache type agrees with the
    gather path over the same cache to f32 rounding."""
    q, k, v, tables, pos = make_case(
        1, kvh, heads, hd, page_size, 300, positions, np.float32 if kv_dtype == np.int8 else kv_dtype
    )
    cache = pools(k, v, kv_dtype)
    ours = kernel(cache, q, tables, pos, window)
    ref = gathered(q, cache, tables, pos, window)
    assert ours.shape == ref.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kv_dtype", [np.float32, np.int8])
def test_a_query_does_not_depend_on_its_batch_tokens_or_table_width(kv_dtype):
    """Alone, in any batch, among more or fewer query tokens, with a wider or narrower table: the same
    bits. Calls of one token per row (decode) and of several (prefill chunks: the tiled form, work
    items of 32 tokens) are two forms whose sums run in different orders, so each is checked against
    itself; they agree with each other to f32 rounding (test_kernel_matches_the_gather_path)."""
    positions = [[900 + i + j for j in range(40)] for i in range(0, 40, 5)]  # 40 tokens: two work items
    q, k, v, tables, pos = make_case(2, 3, 9, 64, 16, 600, positions)
    cache = pools(k, v, kv_dtype)
    full = kernel(cache, q, tables, pos)
    decode = kernel(cache, q[:, :1], tables, pos[:, :1])
    for lo, hi in [(0, 1), (3, 4), (2, 7), (0, 8)]:
        np.testing.assert_array_equal(kernel(cache, q[lo:hi], tables[lo:hi], pos[lo:hi]), full[lo:hi])
        np.testing.assert_array_equal(kernel(cache, q[lo:hi, :1], tables[lo:hi], pos[lo:hi, :1]), decode[lo:hi])
    for row in (0, 5):
        for lo, hi in [(0, 2), (3, 37), (33, 40), (31, 33)]:  # fewer tokens, across and after the item boundary
            need = pos[row, hi - 1] // 16 + 1  # the narrowest table that holds the last token's keys
            alone = kernel(cache, q[row : row + 1, lo:hi], tables[row : row + 1, :need], pos[row : row + 1, lo:hi])
            np.testing.assert_array_equal(alone[0], full[row, lo:hi])
        need = pos[row, 0] // 16 + 1
        alone = kernel(cache, q[row : row + 1, :1], tables[row : row + 1, :need], pos[row : row + 1, :1])
        np.testing.assert_array_equal(alone[0, 0], decode[row, 0])


def test_int8_pools_without_their_scales_are_refused():
    from memloop.engine.kernels.attention import paged_attention

    q, k, v, tables, pos = make_case(3, 3, 9, 64, 16, 20, [[40]])
    cache = pools(k, v, np.int8)
    with pytest.raises(ValueError, match="k_scale and v_scale"):
        paged_attention(q, cache["k"][0], cache["v"][0], tables, pos)
    with pytest.raises(Exception, match="scales"):
        np.asarray(
            paged_attention(
                q, cache["k"][0], cache["v"][0], tables, pos, None, cache["k_scale"][0][:, :3], cache["v_scale"][0]
            )
        )


def test_bad_shapes_and_positions_are_named_errors():
    from memloop.engine.kernels.attention import paged_attention

    q, k, v, tables, pos = make_case(3, 3, 9, 64, 16, 20, [[40]])
    with pytest.raises(Exception, match="outside its row's block table"):
        np.asarray(paged_attention(q, k, v, tables, pos + 1000))
    with pytest.raises(Exception, match="outside the pool"):
        np.asarray(paged_attention(q, k, v, tables + 100, pos))
    with pytest.raises(Exception, match="multiple of KV heads"):
        np.asarray(paged_attention(q[:, :, :8], k, v, tables, pos))


def _step_text(lm, tokens: int, cfg=None, kv_dtype=jnp.float32, **attention) -> str:
    """The jaxpr of one engine forward over `tokens` new tokens per row on the bundled model's pools
    (`attention`: the forward's backend argument; by default what `auto` is on CPU)."""
    from memloop.engine.cache.kv_pages import init_kv_pools
    from memloop.engine.runner.step import forward_paged

    cfg = cfg or lm.config
    cache = init_kv_pools(cfg, 8, 16, kv_dtype, per_layer=lm.per_layer)
    z = jnp.zeros((2, tokens), jnp.int32)
    return str(
        jax.make_jaxpr(
            lambda p, c: forward_paged(
                cfg, p, c, z, z, z, z, jnp.zeros((2, 4), jnp.int32), jnp.zeros((2,), jnp.int32), **attention
            )
        )(lm.params, cache)
    )


@pytest.mark.parametrize(
    "kv_dtype,target",
    [
        (jnp.float32, "memloop_paged_attention"),
        (jnp.float16, "memloop_paged_attention_f16"),
        (jnp.int8, "memloop_paged_attention_q8"),
    ],
)
def test_decode_steps_and_prefill_chunks_read_pages_in_place(lm, kv_dtype, target):
    for tokens in (1, 16):
        text = _step_text(lm, tokens, kv_dtype=kv_dtype)
        assert len(re.findall(rf"{target}\b", text)) == lm.config.num_layers, tokens


def test_the_attention_setting_chooses_the_cpu_kernel(lm, monkeypatch):
    """`auto` on CPU decodes through the kernel; `gather` and MEMLOOP_PAGED_KERNEL=0 keep every call on the gather
    path."""
    from memloop.engine.attention.pallas import resolve_backend

    assert _step_text(lm, 1, attention=resolve_backend("auto")).count("memloop_paged_attention") == lm.config.num_layers
    assert "memloop_paged_attention" not in _step_text(lm, 1, attention=resolve_backend("gather"))
    monkeypatch.setenv("MEMLOOP_PAGED_KERNEL", "0")
    assert "memloop_paged_attention" not in _step_text(lm, 1, attention=resolve_backend("auto"))


def test_a_family_the_kernel_was_not_checked_against_keeps_the_gather(lm, monkeypatch):
    """The kernel is chosen by the model config: a family outside its list decodes through the gather path."""
    import dataclasses

    from memloop.engine.model import config as config_module

    monkeypatch.setitem(config_module.FAMILIES, "other", config_module.FAMILIES["llama"])
    assert "memloop_paged_attention" not in _step_text(lm, 1, dataclasses.replace(lm.config, architecture="other"))


def test_a_layer_option_the_kernel_lacks_goes_to_the_gather_path(monkeypatch):
    """An attention option other than a window (e.g. logit soft-capping) is the gather path's, per layer."""
    from memloop.engine.attention.paged import in_place_attend

    seen = []

    def gather(q, k, v, cache, layer, **options):
        seen.append(options)
        return q, cache

    q, k, v, tables, pos = make_case(4, 3, 9, 64, 16, 8, [[20]])
    cache = {"k": [jnp.asarray(k)], "v": [jnp.asarray(v)]}
    attend = in_place_attend(gather, jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 1), jnp.int32), tables, pos)
    attend(jnp.asarray(q), jnp.asarray(q[:, :, :3]), jnp.asarray(q[:, :, :3]), cache, 0, softcap=30.0)
    out, _ = attend(jnp.asarray(q), jnp.asarray(q[:, :, :3]), jnp.asarray(q[:, :, :3]), cache, 0, window=8)
    assert seen == [{"softcap": 30.0}]
    assert out.shape == q.shape
