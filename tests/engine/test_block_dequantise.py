"""The in-graph de-quantisation of block-form weights (pure JAX, no CPU kernel): bit-exact to `gguf`'s
reference de-quantiser for every block type, whole matrices and gathered rows. It runs on every host,
kernels or not (it used to sit in the kernel-gated module and skip with it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from memloop.engine.model.blocks import BLOCK_WEIGHTS, BlockMatrix, dequantize, from_gguf_rows, take_rows

from tests.engine.block_data import QTYPES, random_blocks, reference_weights


@pytest.mark.parametrize("qtype", QTYPES)
def test_in_graph_dequantisation_is_bit_exact(qtype):
    rng = np.random.default_rng(1)
    cols = 3 * BLOCK_WEIGHTS[qtype]
    raw = random_blocks(rng, qtype, 40, cols)
    ours = np.asarray(jax.jit(lambda r: dequantize(r, qtype, cols))(jnp.asarray(raw)))
    np.testing.assert_array_equal(ours, reference_weights(raw, qtype, 40, cols))
    bm = from_gguf_rows(raw, qtype, 40, cols)
    rows = np.asarray(take_rows(BlockMatrix(jnp.asarray(bm.raw), qtype, bm.shape), jnp.asarray([[3, 0, 39]])))
    np.testing.assert_array_equal(rows[0], reference_weights(raw, qtype, 40, cols)[[3, 0, 39]])
