"""The CPU kernels built for AVX2 (MEMLOOP_KERNEL_ISA=avx2) give bit-identical numbers to the build for
this CPU (AVX-512 where it has it): engine/kernels/vec16.h keeps the AVX-512 lane semantics and
reduction trees on AVX2, and the AVX2 tiles keep each lane's FMA chain.

Each build runs in its own process (a process loads one kernel library) over the same inputs: every
block type at 1, 3, 32 and 130 rows (the single-row tile, a remainder tile, full row tiles, rows in
more than one part of the panel), one call for
several matrices, and paged attention over f32, f16 and int8 pools with decode and multi-token rows,
a sliding window among them. On an AVX2-only host both builds are AVX2 and the check is trivial; on an
AVX-512 host it compares the two instruction sets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from memloop.engine import kernels
from memloop.engine.model.blocks import BLOCK_BYTES, BLOCK_WEIGHTS

from tests.engine.kernel_gate import needs_kernels

pytestmark = needs_kernels

ROOT = Path(__file__).resolve().parents[2]
QTYPES = ["Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
ROWS = (1, 3, 32, 130)

# Runs every kernel over the inputs in argv[1] and saves the outputs to argv[2].
_SCRIPT = r"""
import sys
import jax, jax.numpy as jnp, numpy as np
from memloop.engine import kernels
from memloop.engine.kernels.attention import paged_attention
from memloop.engine.cache.kv_pages import quantize
kernels.load()
inp = np.load(sys.argv[1])
out = {"isa": np.array(kernels.isa())}
for name in inp.files:
    if name.startswith("w_"):
        qtype = name[2:]
        w = jnp.asarray(inp[name])
        for rows in (1, 3, 32, 130):
            x = jnp.asarray(inp[f"x_{qtype}"][:rows])
            out[f"mm_{qtype}_{rows}"] = np.asarray(jax.jit(lambda x, w: kernels.qmatmul(x, w, qtype))(x, w))
        x3 = jnp.asarray(inp[f"x_{qtype}"][:3])
        many = jax.jit(lambda x, w: kernels.qmatmul_many(x, [w[:7], w[7:]], qtype))(x3, w)
        out[f"many_{qtype}"] = np.concatenate([np.asarray(m) for m in many], axis=1)
q, tables = jnp.asarray(inp["q"]), jnp.asarray(inp["tables"])
for dtype in ("float32", "float16", "int8"):
    k, v = jnp.asarray(inp["k"]), jnp.asarray(inp["v"])
    if dtype == "int8":
        (k, ks), (v, vs) = quantize(k), quantize(v)
        extra = (ks, vs)
    else:
        k, v, extra = k.astype(dtype), v.astype(dtype), ()
    for window in (0, 5):
        for part, pos in (("decode", inp["pos_decode"]), ("chunk", inp["pos_chunk"])):
            qq = q[:, :pos.shape[1]]
            fn = jax.jit(lambda q, k, v, t, p, *s: paged_attention(q, k, v, t, p, window or None, *s))
            out[f"attn_{dtype}_{window}_{part}"] = np.asarray(fn(qq, k, v, tables, jnp.asarray(pos), *extra))
np.savez(sys.argv[2], **out)
"""


def _inputs(path: Path) -> None:
    rng = np.random.default_rng(11)
    arrays = {}
    for qtype in QTYPES:
        cols = 2 * BLOCK_WEIGHTS[qtype]
        nb, bb = cols // BLOCK_WEIGHTS[qtype], BLOCK_BYTES[qtype]
        raw = rng.integers(0, 256, size=(19, nb, bb), dtype=np.uint8)
        # finite f16 scales (and offsets/mins) at every f16 field a block type has
        for at in {"Q4_1": (0, 2), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}.get(qtype, (0,)):
            half = (rng.standard_normal((19, nb)) * 0.01).astype(np.float16)
            raw[..., at : at + 2] = half.view(np.uint8).reshape(19, nb, 2)
        arrays[f"w_{qtype}"] = raw.reshape(19, nb * bb)
        arrays[f"x_{qtype}"] = rng.standard_normal((max(ROWS), cols)).astype(np.float32)
    kvh, heads, hd, page_size, pages = 2, 6, 64, 16, 40
    arrays["k"] = rng.standard_normal((kvh, pages, page_size, hd)).astype(np.float32)
    arrays["v"] = rng.standard_normal((kvh, pages, page_size, hd)).astype(np.float32)
    arrays["tables"] = np.stack([rng.permutation(pages)[:30] for _ in range(3)]).astype(np.int32)
    arrays["q"] = (rng.standard_normal((3, 4, heads, hd)) * 2).astype(np.float32)
    arrays["pos_decode"] = np.asarray([[3], [300], [459]], np.int32)
    arrays["pos_chunk"] = np.asarray([[0, 1, 2, 3], [250, 251, 252, 253], [400, 401, 402, 403]], np.int32)
    np.savez(path, **arrays)


def _outputs(inputs: Path, out: Path, isa: str) -> dict[str, np.ndarray]:
    env = {**os.environ, "MEMLOOP_KERNEL_ISA": isa, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(inputs), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


def test_the_avx2_build_gives_the_native_builds_numbers(tmp_path):
    inputs = tmp_path / "inputs.npz"
    _inputs(inputs)
    native = _outputs(inputs, tmp_path / "native.npz", "native")
    avx2 = _outputs(inputs, tmp_path / "avx2.npz", "avx2")
    assert str(avx2.pop("isa")) == "avx2"
    assert str(native.pop("isa")) == kernels.isa()
    assert native.keys() == avx2.keys() and len(native) == 7 * (len(ROWS) + 1) + 3 * 2 * 2
    for name in native:
        assert np.isfinite(native[name]).all(), name
        # bit for bit, signed zeros included
        assert native[name].tobytes() == avx2[name].tobytes(), (
            f"{name}: max |diff| {np.abs(native[name] - avx2[name]).max()}"
        )


def test_an_unknown_isa_setting_is_a_named_error(monkeypatch):
    monkeypatch.setenv("MEMLOOP_KERNEL_ISA", "sse2")
    with pytest.raises(kernels.KernelBuildError, match="MEMLOOP_KERNEL_ISA must be one of"):
        kernels.isa_setting()
