"""The kernel's AMX tile path (qmatmul.cc, Intel Sapphire Rapids and later): on the bundled model's own
layer matrices it agrees with the AVX-512 path and with a float64 product to f32's rounding (not bit for
bit: it splits x and the weights into bf16 pieces and sums in another order), a row's numbers do not
depend on the other rows of its call, and the engine sends calls of `KERNEL_AMX_MIN_ROWS` rows or more
to it. Skipped where the host has no AMX tiles (or Linux does not grant them), with that reason."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from memloop.engine import kernels
from memloop.engine.model import blocks
from memloop.engine.model.blocks import BlockMatrix, dequantize

from tests.engine.kernel_gate import needs_kernels

pytestmark = needs_kernels


@pytest.fixture(scope="module")
def amx() -> None:
    if not kernels.amx_ready():
        pytest.skip(
            "this host has no AMX tiles for the kernel (needs AMX-TILE and AMX-BF16, an Intel Xeon of the "
            "Sapphire Rapids generation or later, and Linux's grant of the tile state)"
        )


@pytest.fixture(scope="module")
def layer(lm) -> list[BlockMatrix]:
    first = lm.params["layers"][0]
    ws = [w for w in first.values() if isinstance(w, BlockMatrix)]
    assert ws, "the bundled model's layers are in block form"
    return ws


def _products(x: np.ndarray, w: BlockMatrix, amx: bool) -> np.ndarray:
    fn = jax.jit(lambda x, r: kernels.qmatmul(x, r, w.qtype, amx=amx))
    return np.asarray(fn(jnp.asarray(x), jnp.asarray(w.raw)))


# |error| <= TOL * sum_i |x_i w_i|: measured 1.7e-7 on these matrices (the AVX-512 path: 6e-8); the
# split of both operands into two bf16 pieces only (three products) gave 1.3e-6 and fails it.
TOL = 5e-7


@pytest.mark.parametrize("rows", [32, 77, 512])
def test_amx_agrees_with_avx512_and_float64_on_the_models_matrices(amx, layer, rows):
    rng = np.random.default_rng(rows)
    for w in layer:
        x = rng.standard_normal((rows, w.shape[1])).astype(np.float32)
        dense = np.asarray(dequantize(jnp.asarray(w.raw), w.qtype, w.shape[1]), np.float64)
        ref = x.astype(np.float64) @ dense.T
        scale = np.abs(x).astype(np.float64) @ np.abs(dense).T
        tiles, vectors = _products(x, w, True), _products(x, w, False)
        assert tiles.shape == (rows, w.shape[0]) and tiles.dtype == np.float32
        assert not np.array_equal(tiles, vectors), "the tile path did not run (its sums are in another order)"
        for name, y in (("amx", tiles), ("avx512", vectors)):
            err = float(np.max(np.abs(y - ref) / scale))
            assert err < TOL, (name, w.qtype, w.shape, err)


def test_amx_rows_do_not_depend_on_their_call(amx, layer):
    """Rows past a tile's 16 (and a block's 32) are zero-padded, and each (row, output) sum is the same
    sequence of tile products whatever else the call holds."""
    w = layer[0]
    x = np.random.default_rng(4).standard_normal((70, w.shape[1])).astype(np.float32)
    whole = _products(x, w, True)
    np.testing.assert_array_equal(_products(x[37:69], w, True), whole[37:69])
    np.testing.assert_array_equal(_products(x[:33], w, True), whole[:33])


def test_the_engine_sends_large_calls_to_the_tiles(amx, layer):
    least = blocks.KERNEL_AMX_MIN_ROWS[blocks.host_kind()]
    assert blocks.kernel_amx_min_rows() == least
    assert [blocks.kernel_unit(n) for n in (1, least - 1, least, 512)] == ["avx512"] * 2 + ["amx-bf16"] * 2
    w = layer[0]
    x = np.random.default_rng(5).standard_normal((least, w.shape[1])).astype(np.float32)
    got = np.asarray(jax.jit(blocks.block_matmul)(jnp.asarray(x), w))
    np.testing.assert_array_equal(got, _products(x, w, True))
    got = np.asarray(jax.jit(blocks.block_matmul)(jnp.asarray(x[:-1]), w))
    np.testing.assert_array_equal(got, _products(x[:-1], w, False))


def test_the_amx_paths_ceiling_is_the_tiles_rate_over_its_products(amx):
    """`memloop bench model` takes a figure's ceiling from the unit its path ran on: the f32 GEMM rate for
    vector FMAs, the tiles' measured bf16 rate over the six bf16 products of one multiply-add for AMX."""
    from memloop.bench.model import unit_ceiling_gmacs

    peak = kernels.amx_peak_gmacs(0.02)
    assert peak > 0
    assert kernels.AMX_PRODUCTS == 6
    assert unit_ceiling_gmacs("amx-bf16", 100.0, peak) == peak / 6
    assert unit_ceiling_gmacs("avx512", 100.0, peak) == unit_ceiling_gmacs(None, 100.0, peak) == 100.0
