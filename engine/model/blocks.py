"""Weight matrices kept in their GGUF block form and multiplied without an f32 copy.

A `BlockMatrix` is the raw GGUF bytes of an output-major matrix [out, in]. Each row is a run of
blocks: for Q4_0/Q4_1/Q5_0/Q8_0, in/32 blocks of 32 weights with an f16 scale (and, for Q4_1, an f16
offset; for Q5_0, 32 fifth bits); for the k-quants Q4_K/Q5_K/Q6_K, in/256 super-blocks of 256
weights with an f16 scale (Q4_K/Q5_K: and an f16 min) and per-32 (Q6_K: per-16) sub-block scales.
Other GGUF types (Q5_1, Q2_K, Q3_K, F16, ...) and rows whose width is not a whole number of
blocks are de-quantised to dense f32 by the loader, which logs which. It is a pytree whose only
leaf is the uint8 array, so it rides through jit like any parameter.

`block_matmul(x, w)` picks, per call shape (`matmul_path`):
  * the CPU kernel (memloop.engine.kernels), which reads 0.56-1.06 bytes per weight instead of 4 and
    de-quantises in registers (one row), or once per slice of outputs into an f32 panel that the
    rows share (decode batches);
  * above `kernel_max_rows()` rows (prefill chunks), de-quantise the matrix in the graph and use
    XLA's dot, where XLA's GEMM was measured the faster one on both instruction sets. The limit is
    the one measured on this host where `memloop bench rows` recorded one (row_limit.py), else the
    per-instruction-set table below.
Both see bit-identical weights (the values `gguf`'s de-quantiser gives).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

BLOCK = 32  # weights per GGUF block (Q4_0, Q4_1, Q5_0, Q8_0) and per k-quant sub-block
SUPER = 256  # weights per k-quant super-block (Q4_K, Q5_K, Q6_K)
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q8_0": 34, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
BLOCK_WEIGHTS = {q: SUPER if q.endswith("_K") else BLOCK for q in BLOCK_BYTES}
# The most rows a call sends to the kernel, per instruction set the kernels are built for (None: every
# call); above it the in-graph de-quantisation + XLA's dot was measured faster. AVX2 (a Zen 3 core,
# 3 x 3 panel tiles): the kernel led up to 64 rows, XLA from 128-256. AVX-512 (one Zen 5 core, 2 x 8
# panel tiles, rows in parts that stay in L2): the kernel led 1.8-2.2x at 32 rows and 1.04-1.14x at
# 128, and ran 0.88-0.92x of XLA at the 512-row prefill chunk (docs/bench-log.md, 2026-11-28). AVX-512 on an
# Intel Xeon with AMX (2 cores under KVM, `memloop bench rows`, 2026-12-05, a host shared at load average
# 20-40): XLA's dot was the slower one at every row count measured, the kernel 1.2-1.6x at 128-512 rows on a
# layer's matrices (the whole 512-token prefill, alternated
# three times in one process at that load: 1.98x, 0.99x, 0.93x: unsettled), so the table keeps AVX-512's 128
# there until a quiet host confirms it; `memloop bench rows` records a host's own crossover, which overrides
# the table. Keyed by `host_kind()`.
KERNEL_MAX_ROWS: dict[str, int | None] = {"avx2": 64, "avx512": 128, "avx512-amx": None}
# The fewest rows of a kernel call that take the AMX tile path (qmatmul.cc: bf16 tiles, each operand split
# into a bf16 head and tail) instead of the AVX-512 FMAs, per host kind; a kind not listed has no tiles. The
# tile path also needs the kernel built with AMX and Linux's grant of the tile state (`kernels.amx_ready`).
KERNEL_AMX_MIN_ROWS: dict[str, int] = {"avx512-amx": 64}


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class BlockMatrix:
    raw: Any  # uint8 [out, row_bytes(qtype, in)]
    qtype: str
    shape: tuple[int, int]  # (out, in) of the de-quantised matrix

    def tree_flatten(self) -> tuple[tuple[Any], tuple[str, tuple[int, int]]]:
        return (self.raw,), (self.qtype, self.shape)

    @classmethod
    def tree_unflatten(cls, aux: tuple[str, tuple[int, int]], children: tuple[Any]) -> "BlockMatrix":
        return cls(children[0], *aux)


def has_block_form(qtype: str, cols: int) -> bool:
    """Whether rows of `cols` weights of GGUF type `qtype` can stay in block form."""
    return qtype in BLOCK_BYTES and cols % BLOCK_WEIGHTS[qtype] == 0


def row_bytes(qtype: str, cols: int) -> int:
    """Bytes of one row of `cols` weights in block form."""
    return cols // BLOCK_WEIGHTS[qtype] * BLOCK_BYTES[qtype]


# Byte offsets of the f16 scales (and mins) in each block: every other byte is an integer code or a
# small integer sub-scale, so a block's weights are finite exactly when these are.
SCALE_OFFSETS = {
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q8_0": (0,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}


def nonfinite_blocks(raw: np.ndarray, qtype: str) -> int:
    """How many blocks of `raw` (a block-form tensor's bytes) have a NaN or infinite f16 scale: one
    strided pass over 2 bytes per block, not a de-quantisation."""
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, BLOCK_BYTES[qtype])
    bad = np.zeros(len(blocks), bool)
    for at in SCALE_OFFSETS[qtype]:
        half = np.ascontiguousarray(blocks[:, at : at + 2]).view(np.float16)[:, 0]
        bad |= ~np.isfinite(half)
    return int(bad.sum())


def from_gguf_rows(data: np.ndarray, qtype: str, rows: int, cols: int) -> BlockMatrix:
    """A GGUF tensor's bytes as a BlockMatrix [rows, cols]; checks the byte count first."""
    if not has_block_form(qtype, cols):
        raise ValueError(
            f"{qtype} rows of {cols} weights have no block form here "
            f"(types {', '.join(BLOCK_BYTES)}, rows of whole blocks)"
        )
    width = row_bytes(qtype, cols)
    raw = np.ascontiguousarray(np.asarray(data, dtype=np.uint8).reshape(rows, width))
    return BlockMatrix(raw, qtype, (rows, cols))


def _halves(raw: jax.Array, start: int) -> jax.Array:
    """The f16 at byte `start` of every block, as f32: [..., nb, bytes] -> [..., nb]."""
    pair = raw[..., start : start + 2].astype(jnp.uint16)
    return jax.lax.bitcast_convert_type(pair[..., 0] | (pair[..., 1] << 8), jnp.float16).astype(jnp.float32)


def _scale_min_k4(packed: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The 8 six-bit sub-block scales and mins of Q4_K/Q5_K super-blocks: [..., 12] -> 2 x [..., 8] f32."""
    d, m, md = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    sc = jnp.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = jnp.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.astype(jnp.float32), mn.astype(jnp.float32)


def _nibbles(qs: jax.Array, width: int) -> jax.Array:
    """Runs of `width` bytes -> their low nibbles then their high nibbles: [..., n*width] -> [..., 2n*width]."""
    runs = qs.reshape(*qs.shape[:-1], -1, 1, width)
    both = jnp.concatenate([runs & 0x0F, runs >> 4], axis=-2)
    return both.reshape(*qs.shape[:-1], -1)


def _dequantize_k(blocks: jax.Array, qtype: str) -> jax.Array:
    """k-quant super-blocks [..., nb, bytes] -> f32 [..., nb, 256], in `gguf`'s order of operations
    (every product is exact in f32, so only the final subtraction of Q4_K/Q5_K rounds)."""
    if qtype == "Q6_K":
        ql, qh = blocks[..., 0:128], blocks[..., 128:192]
        scales = jax.lax.bitcast_convert_type(blocks[..., 192:208], jnp.int8).astype(jnp.float32)
        d = _halves(blocks, 208)[..., None] * scales  # [..., nb, 16]: one scale per 16 weights
        low = _nibbles(ql, 64)  # per half of 128: low nibbles of 64 bytes, then their high nibbles
        runs = qh.reshape(*qh.shape[:-1], 2, 1, 32)
        high = ((runs >> jnp.arange(0, 8, 2, dtype=jnp.uint8)[:, None]) & 3).reshape(*qh.shape[:-1], 256)
        q = (low | (high << 4)).astype(jnp.float32) - 32.0
        return (d[..., None] * q.reshape(*q.shape[:-1], 16, 16)).reshape(*q.shape)
    sc, mn = _scale_min_k4(blocks[..., 4:16])
    dsc = (_halves(blocks, 0)[..., None] * sc)[..., None]  # [..., nb, 8, 1]
    dmin = (_halves(blocks, 2)[..., None] * mn)[..., None]
    q = _nibbles(blocks[..., 16:144] if qtype == "Q4_K" else blocks[..., 48:176], 32)
    q = q.reshape(*q.shape[:-1], 8, 32)
    if qtype == "Q5_K":  # bit t of byte l of the 32 bytes after the scales: fifth bit of weight 32t+l
        qh = blocks[..., 16:48]
        q = q | (((qh[..., None, :] >> jnp.arange(8, dtype=jnp.uint8)[:, None]) & 1) << 4)
    w = dsc * q.astype(jnp.float32) - dmin
    return w.reshape(*w.shape[:-2], 256)


def dequantize(raw: jax.Array, qtype: str, cols: int) -> jax.Array:
    """Rows of GGUF blocks [..., row_bytes(qtype, cols)] -> f32 [..., cols], exactly as `gguf` de-quantises."""
    lead = raw.shape[:-1]
    if BLOCK_WEIGHTS[qtype] == SUPER:
        blocks = raw.reshape(*lead, cols // SUPER, BLOCK_BYTES[qtype])
        return _dequantize_k(blocks, qtype).reshape(*lead, cols)
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


def host_kind(isa: str | None = None, flags: set[str] | None = None) -> str:
    """The row-limit table's key for this host: the kernels' instruction set, "-amx" added for an AVX-512
    host with AMX tiles (Intel Sapphire Rapids and later), whose XLA dot and kernel cross elsewhere."""
    from memloop.engine import kernels

    isa = isa or kernels.isa()
    flags = kernels.cpu_flags() if flags is None else flags
    return f"{isa}-amx" if isa == "avx512" and "amx_tile" in flags else isa


def kernel_max_rows() -> int | None:
    """The most rows of one call the kernel takes on this host (None: no limit): the limit measured on
    this host (`memloop bench rows`, memloop.engine.model.row_limit) where there is one, else the table
    for its instruction set. The kernels must be available for it to matter."""
    from memloop.engine.model.row_limit import UNMEASURED, measured_max_rows

    measured = measured_max_rows()
    return KERNEL_MAX_ROWS[host_kind()] if measured == UNMEASURED else measured


def kernel_max_rows_source() -> str:
    """Where `kernel_max_rows()` comes from here, for benchmarks' provenance."""
    from memloop.engine.model.row_limit import UNMEASURED, measured_max_rows, record_path

    if measured_max_rows() == UNMEASURED:
        return f"table for {host_kind()} (blocks.KERNEL_MAX_ROWS; this host unmeasured)"
    return f"measured on this host ({record_path()})"


def kernel_amx_min_rows() -> int | None:
    """The fewest rows of a kernel call that take the AMX tile path here (None: no call does)."""
    from memloop.engine import kernels

    rows = KERNEL_AMX_MIN_ROWS.get(host_kind())
    return rows if rows is not None and kernels.available() and kernels.amx_ready() else None


def kernel_unit(rows: int) -> str | None:
    """The unit a kernel call of `rows` rows multiplies on here: "amx-bf16" (the tile path), "avx512" or
    "avx2" (vector FMAs); None where the call does not go to the kernel. Benchmarks take their compute
    ceiling from it."""
    from memloop.engine import kernels

    if not use_kernel(rows):
        return None
    amx = kernel_amx_min_rows()
    return "amx-bf16" if amx is not None and rows >= amx else kernels.isa()


def use_kernel(rows: int) -> bool:
    from memloop.engine import kernels

    if jax.default_backend() != "cpu" or not kernels.available():
        return False
    limit = kernel_max_rows()
    return limit is None or rows <= limit


def matmul_path(rows: int) -> str:
    """Which path a block matrix times `rows` rows of x takes here: "kernel" (the CPU kernel) or
    "dequant-dot" (de-quantised in the graph, XLA's dot). Benchmarks report it per figure."""
    return "kernel" if use_kernel(rows) else "dequant-dot"


def block_matmuls(x: jax.Array, ws: list[BlockMatrix]) -> list[jax.Array]:
    """[block_matmul(x, w) for w in ws], with one kernel call for all of them when the kernel serves
    these rows and the matrices share a block type and width (bit-identical either way)."""
    from memloop.engine import kernels

    rows = int(np.prod(x.shape[:-1])) if x.ndim > 1 else 1
    if (
        len(ws) > 1
        and len({(w.qtype, w.shape[1]) for w in ws}) == 1
        and len(ws) <= kernels.MAX_MATRICES
        and use_kernel(rows)
    ):
        return kernels.qmatmul_many(x, [w.raw for w in ws], ws[0].qtype, amx=kernel_unit(rows) == "amx-bf16")
    return [block_matmul(x, w) for w in ws]


def block_matmul(x: jax.Array, w: BlockMatrix) -> jax.Array:
    """x [..., in] @ w.T -> [..., out] in f32."""
    rows = int(np.prod(x.shape[:-1])) if x.ndim > 1 else 1
    if use_kernel(rows):
        from memloop.engine.kernels import qmatmul

        return qmatmul(x, w.raw, w.qtype, amx=kernel_unit(rows) == "amx-bf16")
    dense = dequantize(w.raw, w.qtype, w.shape[1])
    return jnp.einsum("...i,oi->...o", x.astype(jnp.float32), dense)
