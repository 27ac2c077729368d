"""GGUF block-form test data shared by the kernel tests and the pure-JAX de-quantisation test."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from memloop.engine.model.blocks import BLOCK_BYTES, BLOCK_WEIGHTS

QTYPES = ["Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
# byte offsets of the f16 scale and, where the type has one, its f16 offset/min
HALVES = {"Q4_1": (0, 2), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def random_blocks(rng: np.random.Generator, qtype: str, rows: int, cols: int) -> np.ndarray:
    """Valid GGUF bytes: random codes and sub-block scales, finite f16 scales (and offsets/mins) of
    realistic size, some of them f16 subnormals (real files have tiny scales)."""
    nb, bb = cols // BLOCK_WEIGHTS[qtype], BLOCK_BYTES[qtype]
    raw = rng.integers(0, 256, size=(rows, nb, bb), dtype=np.uint8)
    size = 0.002 if qtype.endswith("_K") else 0.02  # k-quant d multiplies a 6-8 bit sub-block scale
    for k, at in enumerate(HALVES.get(qtype, (0,))):
        half = (rng.standard_normal((rows, nb)) * size * (1 + 1.5 * k)).astype(np.float16)
        half[rng.random((rows, nb)) < 0.05] = np.float16(3e-6)  # an f16 subnormal
        raw[..., at : at + 2] = half.view(np.uint8).reshape(rows, nb, 2)
    return raw.reshape(rows, nb * bb)


def reference_weights(raw: np.ndarray, qtype: str, rows: int, cols: int) -> np.ndarray:
    return np.asarray(gguf_dequantize(raw, getattr(GGMLQuantizationType, qtype)), np.float32).reshape(rows, cols)
