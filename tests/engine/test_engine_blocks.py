"""Block-form (GGUF Q4_0/Q4_1/Q5_0/Q8_0 and the k-quants Q4_K/Q5_K/Q6_K) weights and the CPU kernel that multiplies
them.

The kernel must see exactly the weights `gguf` de-quantises to, give the same numbers for a row
whatever else is in its batch, and agree with the dense f32 model; where it cannot run, the engine
falls back to dense weights and says why.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from memloop.engine import kernels
from memloop.engine.model.blocks import BLOCK_WEIGHTS, BlockMatrix, block_matmul

from tests.engine.kernel_gate import needs_kernels

pytestmark = needs_kernels  # the in-graph de-quantisation, pure JAX, is tested in test_block_dequantise.py

from tests.engine.block_data import QTYPES, random_blocks, reference_weights


@pytest.mark.parametrize("qtype", QTYPES)
def test_kernel_weights_are_bit_exact(qtype):
    """Multiplying by unit rows reads the weights out of the kernel exactly (every other product is
    a signed zero): each must be the very f32 `gguf` de-quantises to, with every block layout and
    sub-block position of a row covered."""
    rng = np.random.default_rng(5)
    d_out, d_in = 19, 2 * BLOCK_WEIGHTS[qtype]
    raw = random_blocks(rng, qtype, d_out, d_in)
    y = np.asarray(kernels.qmatmul(jnp.eye(d_in, dtype=jnp.float32), jnp.asarray(raw), qtype))
    np.testing.assert_array_equal(y.T, reference_weights(raw, qtype, d_out, d_in))


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("rows", [1, 5, 32])
def test_kernel_matches_float64_reference(qtype, rows):
    """Odd output counts exercise the tile tails; the error is f32 summation error only."""
    rng = np.random.default_rng(2)
    d_out, d_in = 203, 768  # 768 = 24 blocks or 3 super-blocks
    raw = random_blocks(rng, qtype, d_out, d_in)
    w = reference_weights(raw, qtype, d_out, d_in)
    x = rng.standard_normal((rows, d_in)).astype(np.float32)
    y = np.asarray(jax.jit(lambda x, r: kernels.qmatmul(x, r, qtype))(jnp.asarray(x), jnp.asarray(raw)))
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    scale = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T  # bound on the terms summed
    assert y.shape == (rows, d_out) and y.dtype == np.float32
    assert np.all(np.abs(y - ref) <= 1e-6 * scale + 1e-7), float(np.max(np.abs(y - ref) / (scale + 1e-30)))


@pytest.mark.parametrize("qtype", QTYPES)
def test_kernel_rows_do_not_depend_on_their_batch(qtype):
    """A row's outputs are bit-identical alone, at any position of any batch size (the property that
    lets a request's greedy tokens not depend on what shares its step). The slices cross every tile
    change: one row; on AVX2 the two-pass tile (2-5 rows) and the panel tiles (6 rows and more, 3 at a
    time); on AVX-512 the 8 x 2 tile (2-8 rows) and the panel tiles (9 rows and more, 2 at a time)."""
    rng = np.random.default_rng(3)
    raw = jnp.asarray(random_blocks(rng, qtype, 136, 512))
    x = jnp.asarray(rng.standard_normal((37, 512)).astype(np.float32))
    fn = jax.jit(lambda x, r: kernels.qmatmul(x, r, qtype))
    full = np.asarray(fn(x, raw))
    for lo, hi in [
        (0, 1),
        (5, 6),
        (0, 3),
        (2, 4),
        (0, 5),
        (0, 6),
        (4, 9),
        (0, 8),
        (0, 9),
        (1, 11),
        (3, 16),
        (9, 37),
        (30, 37),
        (36, 37),
    ]:
        np.testing.assert_array_equal(np.asarray(fn(x[lo:hi], raw)), full[lo:hi])


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q8_0"])
def test_a_row_over_more_blocks_than_a_tile_converts_at_once(qtype):
    """The decode tile converts its blocks' f16 scales 64 blocks at a time (qmatmul.cc, `kScaleBlocks`):
    at 2,080 inputs (65 blocks) a unit row on either side of that edge reads each weight out exactly,
    and every row alone (the tile) has the bits it has in a 40-row call (the panel)."""
    rng = np.random.default_rng(11)
    d_out, d_in = 21, 65 * 32
    raw = random_blocks(rng, qtype, d_out, d_in)
    w = reference_weights(raw, qtype, d_out, d_in)
    fn = jax.jit(lambda x, r: kernels.qmatmul(x, r, qtype))
    for k in (0, 31, 2047, 2048, 2079):
        unit = np.zeros((1, d_in), np.float32)
        unit[0, k] = 1.0
        np.testing.assert_array_equal(np.asarray(fn(jnp.asarray(unit), jnp.asarray(raw)))[0], w[:, k], err_msg=f"{k}")
    x = jnp.asarray(rng.standard_normal((40, d_in)).astype(np.float32))
    full = np.asarray(fn(x, jnp.asarray(raw)))
    for r in (0, 17, 39):
        np.testing.assert_array_equal(np.asarray(fn(x[r : r + 1], jnp.asarray(raw))), full[r : r + 1])


@pytest.fixture
def kernel_limit(monkeypatch):
    """Sets the kernel's row limit on this host's instruction set (memloop.engine.model.blocks.KERNEL_MAX_ROWS)."""
    from memloop.engine.model import blocks, row_limit

    # a limit `memloop bench rows` recorded for this host would take precedence over the table
    monkeypatch.setattr(row_limit, "measured_max_rows", lambda: row_limit.UNMEASURED)

    def set_limit(rows):
        monkeypatch.setitem(blocks.KERNEL_MAX_ROWS, blocks.host_kind(), rows)

    return set_limit


def test_block_matmul_kernel_and_graph_paths_agree(kernel_limit):
    """Few rows go to the kernel, rows above the limit to de-quantise + XLA dot; the two differ only by f32 rounding."""
    kernel_limit(64)
    rng = np.random.default_rng(4)
    raw = random_blocks(rng, "Q4_1", 64, 128)
    bm = BlockMatrix(jnp.asarray(raw), "Q4_1", (64, 128))
    x = jnp.asarray(rng.standard_normal((65, 128)).astype(np.float32))
    many = np.asarray(block_matmul(x, bm))
    few = np.asarray(block_matmul(x[:3], bm))
    np.testing.assert_allclose(few, many[:3], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0", "Q4_K"])
def test_rows_in_parts_and_wide_inputs_do_not_change_a_rows_outputs(qtype):
    """A prefill-sized call (250 rows: the panel takes rows in parts of 120, and 1536 inputs in two
    parts of 768) gives every row the bits it gets alone and in a decode-sized batch."""
    rng = np.random.default_rng(8)
    raw = jnp.asarray(random_blocks(rng, qtype, 100, 1536))
    x = jnp.asarray(rng.standard_normal((250, 1536)).astype(np.float32))
    fn = jax.jit(lambda x, r: kernels.qmatmul(x, r, qtype))
    full = np.asarray(fn(x, raw))
    for lo, hi in [
        (0, 1),
        (118, 119),
        (119, 120),
        (120, 121),
        (239, 240),
        (240, 241),
        (249, 250),
        (100, 132),
        (117, 125),
        (0, 32),
    ]:
        np.testing.assert_array_equal(np.asarray(fn(x[lo:hi], raw)), full[lo:hi], err_msg=f"rows {lo}-{hi}")


def test_a_prefill_chunk_through_the_kernel_equals_the_dense_product(kernel_limit):
    """512 rows (the engine's prefill chunk) through the kernel's panel: the product of the de-quantised
    weights within f32 summation error, and the graph holds the kernel call, not a de-quantisation."""
    from memloop.engine.model.blocks import block_matmuls, dequantize, matmul_path

    kernel_limit(None)
    assert matmul_path(512) == "kernel"
    rng = np.random.default_rng(9)
    ws = [BlockMatrix(jnp.asarray(random_blocks(rng, "Q4_1", n, 576)), "Q4_1", (n, 576)) for n in (576, 192)]
    x = rng.standard_normal((512, 576)).astype(np.float32)
    fn = jax.jit(lambda x: block_matmuls(x, ws))
    assert "memloop_qmatmul_many" in fn.lower(jnp.asarray(x)).as_text()
    for y, w in zip(fn(jnp.asarray(x)), ws):
        dense = np.asarray(dequantize(w.raw, w.qtype, w.shape[1])).astype(np.float64)
        ref = x.astype(np.float64) @ dense.T
        scale = np.abs(x).astype(np.float64) @ np.abs(dense).T
        assert np.all(np.abs(np.asarray(y) - ref) <= 1e-6 * scale + 1e-7)


def test_the_path_a_call_takes_follows_the_hosts_row_limit(kernel_limit):
    """matmul_path names what block_matmul runs: the kernel up to the limit of this host's instruction
    set, the in-graph de-quantisation + dot above it, the kernel at any rows without a limit."""
    from memloop.engine.model.blocks import host_kind, kernel_max_rows, matmul_path

    assert kernel_max_rows() == {"avx2": 64, "avx512": 128, "avx512-amx": None}[host_kind()]
    kernel_limit(64)
    assert [matmul_path(n) for n in (1, 32, 64, 65, 512)] == ["kernel"] * 3 + ["dequant-dot"] * 2
    bm = BlockMatrix(jnp.asarray(random_blocks(np.random.default_rng(1), "Q4_1", 8, 64)), "Q4_1", (8, 64))
    for rows, kernel in ((64, True), (65, False)):
        text = jax.jit(lambda x: block_matmul(x, bm)).lower(jnp.zeros((rows, 64), jnp.float32)).as_text()
        assert ("memloop_qmatmul" in text) == kernel
    kernel_limit(None)
    assert [matmul_path(n) for n in (1, 65, 512, 4096)] == ["kernel"] * 4


def test_kernel_rejects_mismatched_shapes():
    raw = jnp.zeros((8, 2 * 20), jnp.uint8)  # Q4_1 rows of width 64
    with pytest.raises(Exception, match="row bytes"):
        jax.block_until_ready(kernels.qmatmul(jnp.zeros((1, 96), jnp.float32), raw, "Q4_1"))


def test_bundled_model_loads_block_form_and_matches_dense(lm, smollm2_gguf):
    """The default CPU load keeps the GGUF blocks (embedding and tied head included) and gives the
    dense model's logits and greedy tokens."""
    from memloop.engine.model.decoder import forward, load_model, no_cache_attention
    from memloop.engine.runner.reference import generate
    from memloop.engine.sample.sampling import SamplingParams

    assert isinstance(lm.params["embed"], BlockMatrix) and lm.params["embed"].qtype == "Q8_0"
    assert isinstance(lm.params["layers"][0]["w_gate"], BlockMatrix)
    dense = load_model(smollm2_gguf, blocks=False)
    assert not isinstance(dense.params["embed"], BlockMatrix)
    block_bytes = sum(x.nbytes for x in jax.tree.leaves(lm.params))
    dense_bytes = sum(x.nbytes for x in jax.tree.leaves(dense.params))
    assert block_bytes * 4 < dense_bytes  # 0.56-1.06 bytes per weight instead of 4
    prompt = [{"role": "user", "content": "Name a large city on a river."}]
    ids = lm.tokenizer.chat_ids(prompt)
    toks = jnp.asarray([ids], jnp.int32)
    pos = jnp.arange(len(ids), dtype=jnp.int32)[None]
    fn = jax.jit(lambda p, t, q: forward(p, lm.config, t, q, None, no_cache_attention(q))[0])
    for n in (1, len(ids)):  # one row (kernel) and the whole prompt
        a = np.asarray(fn(lm.params, toks[:, :n], pos[:, :n]))
        b = np.asarray(fn(dense.params, toks[:, :n], pos[:, :n]))
        assert np.abs(a - b).max() < 2e-3
    sp = SamplingParams(max_tokens=24, stop_token_ids=())
    assert generate(lm, [prompt], sp)[0].token_ids == generate(dense, [prompt], sp)[0].token_ids


def test_kernels_off_falls_back_to_dense(monkeypatch, smollm2_gguf):
    from memloop.engine.errors import RequestError
    from memloop.engine.model.decoder import load_model

    monkeypatch.setenv("MEMLOOP_KERNELS", "0")
    lm = load_model(smollm2_gguf, load_tokenizer=False)
    assert not isinstance(lm.params["embed"], BlockMatrix)
    with pytest.raises(RequestError, match="blocks"):
        load_model(smollm2_gguf, load_tokenizer=False, blocks=True)


def test_a_failed_build_is_reported_not_raised(monkeypatch, tmp_path):
    """No compiler: available() is False with the reason logged once, and load() says what to do."""
    monkeypatch.setattr(kernels, "_state", {})
    monkeypatch.setenv("MEMLOOP_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(kernels.shutil, "which", lambda name: None)
    with pytest.raises(kernels.KernelBuildError):
        kernels.load()
    assert kernels.available() is False


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("rows", [1, 3, 32])
def test_one_call_for_several_matrices_is_bit_identical(qtype, rows):
    """`qmatmul_many` (a layer's q/k/v or gate/up in one kernel call) gives each matrix's product
    exactly as its own call does, for matrices of different heights (tile tails included)."""
    rng = np.random.default_rng(6)
    d_in = 2 * BLOCK_WEIGHTS[qtype]
    raws = [jnp.asarray(random_blocks(rng, qtype, d_out, d_in)) for d_out in (37, 8, 203)]
    x = jnp.asarray(rng.standard_normal((rows, d_in)).astype(np.float32))
    many = jax.jit(lambda x, *r: kernels.qmatmul_many(x, list(r), qtype))(x, *raws)
    for y, raw in zip(many, raws):
        np.testing.assert_array_equal(
            np.asarray(y), np.asarray(jax.jit(lambda x, r: kernels.qmatmul(x, r, qtype))(x, raw))
        )


def test_block_matmuls_use_one_kernel_call(kernel_limit):
    """A decode step's q/k/v multiply is one custom call; rows above the kernel's limit keep one dot per matrix."""
    from memloop.engine.model.blocks import block_matmuls

    kernel_limit(64)
    rng = np.random.default_rng(7)
    ws = [BlockMatrix(jnp.asarray(random_blocks(rng, "Q4_1", n, 64)), "Q4_1", (n, 64)) for n in (64, 16, 16)]
    for rows, calls in ((1, 1), (65, 0)):
        x = jnp.zeros((rows, 64), jnp.float32)
        text = jax.jit(lambda x: block_matmuls(x, ws)).lower(x).as_text()
        assert text.count("memloop_qmatmul_many") == calls and text.count('"memloop_qmatmul"') == 0
