"""Weight matrices kept in their GGUF block form (Q4_0, Q4_1, Q5_0, Q8_0) and multiplied without an f32 copy.

A `BlockMatrix` is the raw GGUF bytes of an output-major matrix [out, in]: each row is in/32 blocks
of 32 weights with an f16 scale (and, for Q4_1, an f16 offset; for Q5_0, 32 fifth bits). The
k-quants (Q4_K, Q6_K: 256-weight super-blocks) have no block form here; the loader de-quantises
them to dense f32 and logs which tensors it did. It is a pytree whose only leaf is the
uint8 array, so it rides through jit like any parameter.

`block_matmul(x, w)` picks, per call shape:
  * few rows (decoding): the CPU kernel (engine.kernels), which reads 0.56-1.06 bytes per weight
    instead of 4 and de-quantises in registers;
  * many rows (prefill chunks): de-quantise the matrix in the graph and use XLA's dot, where the
    f32 copy is paid once for many rows and XLA's GEMM is the faster one.
Both see bit-identical weights (the values `gguf`'s de-quantiser gives).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

BLOCK = 32  # weights per GGUF block (Q4_0, Q4_1, Q8_0)
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q8_0": 34}
KERNEL_MAX_ROWS = 64  # above this many rows the in-graph de-quantisation + XLA dot is faster (docs/engine-model.md)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class BlockMatrix:
    raw: Any  # uint8 [out, in/32 * BLOCK_BYTES[qtype]]
    qtype: str
    shape: tuple[int, int]  # (out, in) of the de-quantised matrix

    def tree_flatten(self) -> tuple[tuple[Any], tuple[str, tuple[int, int]]]:
        return (self.raw,), (self.qtype, self.shape)

    @classmethod
    def tree_unflatten(cls, aux: tuple[str, tuple[int, int]], children: tuple[Any]) -> "BlockMatrix":
        return cls(children[0], *aux)


def from_gguf_rows(data: np.ndarray, qtype: str, rows: int, cols: int) -> BlockMatrix:
    """A GGUF tensor's bytes as a BlockMatrix [rows, cols]; checks the byte count first."""
    if qtype not in BLOCK_BYTES:
        raise ValueError(f"{qtype} has no block form here (only {', '.join(BLOCK_BYTES)})")
    width = cols // BLOCK * BLOCK_BYTES[qtype]
    raw = np.ascontiguousarray(np.asarray(data, dtype=np.uint8).reshape(rows, width))
    return BlockMatrix(raw, qtype, (rows, cols))


def _halves(raw: jax.Array, start: int) -> jax.Array:
    """The f16 at byte `start` of every block, as f32: [..., nb, bytes] -> [..., nb]."""
    pair = raw[..., start:start + 2].astype(jnp.uint16)
    return jax.lax.bitcast_convert_type(pair[..., 0] | (pair[..., 1] << 8), jnp.float16).astype(jnp.float32)


def dequantize(raw: jax.Array, qtype: str, cols: int) -> jax.Array:
    """Rows of GGUF blocks [..., cols/32 * bytes] -> f32 [..., cols], exactly as `gguf` de-quantises."""
    lead = raw.shape[:-1]
    blocks = raw.reshape(*lead, cols // BLOCK, BLOCK_BYTES[qtype])
    d = _halves(blocks, 0)[..., None]
    if qtype == "Q8_0":
        q = jax.lax.bitcast_convert_type(blocks[..., 2:], jnp.int8).astype(jnp.float32)
        w = d * q
    elif qtype == "Q5_0":
        qh = blocks[..., 2:6].astype(jnp.uint32)
        word = qh[..., 0] | (qh[..., 1] << 8) | (qh[..., 2] << 16) | (qh[..., 3] << 24)
        fifth = (word[..., None] >> jnp.arange(32, dtype=jnp.uint32)) & 1
        qs = blocks[..., 6:]
        low = jnp.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(jnp.uint32)
        w = d * ((low | (fifth << 4)).astype(jnp.float32) - 16.0)
    else:
        qs = blocks[..., 4:] if qtype == "Q4_1" else blocks[..., 2:]
        q = jnp.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(jnp.float32)
        w = d * q + _halves(blocks, 2)[..., None] if qtype == "Q4_1" else d * (q - 8.0)
    return w.reshape(*lead, cols)


def take_rows(w: BlockMatrix, ids: jax.Array) -> jax.Array:
    """Rows `ids` of the matrix, de-quantised (an embedding lookup): [*ids.shape, in] f32."""
    return dequantize(jnp.take(w.raw, ids, axis=0), w.qtype, w.shape[1])


def use_kernel(rows: int) -> bool:
    from engine import kernels

    return rows <= KERNEL_MAX_ROWS and jax.default_backend() == "cpu" and kernels.available()


def block_matmul(x: jax.Array, w: BlockMatrix) -> jax.Array:
    """x [..., in] @ w.T -> [..., out] in f32."""
    rows = int(np.prod(x.shape[:-1])) if x.ndim > 1 else 1
    if use_kernel(rows):
        from engine.kernels import qmatmul

        return qmatmul(x, w.raw, w.qtype)
    dense = dequantize(w.raw, w.qtype, w.shape[1])
    return jnp.einsum("...i,oi->...o", x.astype(jnp.float32), dense)
