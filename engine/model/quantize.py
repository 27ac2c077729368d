"""Weight-only int8 quantisation of the decoder's layer matrices (an engine option, `quantize: int8`).

Each row of an output-major matrix [out, in] is cut into blocks of 32 weights; a block keeps int8
codes and an f32 scale and offset, `w ~= d * q + m` (affine: the block's range [min, max] onto the
256 codes, round to nearest). That is the packed-matrix form the model already de-quantises inside
the jitted step (`memloop.engine.model.decoder.matmul` with `{"q", "d", "m"}`), so an accelerator reads 1.25 bytes
per weight instead of 2 (bf16) or 4 (f32); activations, norms, the embedding/head and the KV cache
keep the compute dtype.

Affine rather than symmetric (`d = max|w| / 127`): GGUF's 4-bit blocks hold 16 evenly spaced levels
between the block's min and max, and 255 = 15 x 17 steps put every one of them on a code, so a
Q4_0/Q4_1/Q8_0 checkpoint keeps its weights to float rounding. The symmetric form changed the
bundled Q4_1 model's greedy output on 2 of the 5 test prompts within 48 tokens; the affine form
keeps all of them (tests/engine/test_quantize.py). For a bf16/f32 checkpoint it is an approximation
whose effect on output must be checked on the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from memloop.engine.errors import RequestError

BLOCK = 32
MATRICES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def int8_blocks(w: np.ndarray) -> dict[str, np.ndarray]:
    """[..., out, in] floats -> {"q": int8 [..., out, in], "d", "m": f32 [..., out, in/32]}, w ~= d*q + m."""
    w = np.asarray(w, np.float32)
    if w.shape[-1] % BLOCK:
        raise RequestError(
            f"int8 quantisation cuts rows into blocks of {BLOCK} weights; a matrix of shape "
            f"{w.shape} does not divide. Load this model without `quantize`."
        )
    blocks = w.reshape(*w.shape[:-1], w.shape[-1] // BLOCK, BLOCK).astype(np.float64)
    low, high = blocks.min(axis=-1), blocks.max(axis=-1)
    d = (high - low) / 255.0
    codes = np.rint((blocks - low[..., None]) / np.where(d == 0, 1.0, d)[..., None])  # 0..255
    q = (np.clip(codes, 0, 255) - 128).astype(np.int8)
    return {"q": q.reshape(w.shape), "d": d.astype(np.float32), "m": (low + 128.0 * d).astype(np.float32)}


def quantize_layers(layers: dict[str, Any], method: str) -> dict[str, Any]:
    """The layer weights with every dense projection matrix in int8 block form (norms, biases kept)."""
    if method != "int8":
        raise RequestError(f"unknown quantisation {method!r}; the engine offers int8")
    out = dict(layers)
    for key in MATRICES:
        value = layers[key]
        if isinstance(value, (list, dict)):
            raise RequestError(
                "int8 quantisation applies to dense weights; these are already in block form "
                "(load with blocks=False, packed=False)"
            )
        out[key] = int8_blocks(value)
    return out
