"""The kernels' helper threads (engine/kernels/crew.h): calls are split over the crew, calls made
while the crew is busy go to XLA's pool (weights) or stay on their thread (small attention), and
none of that changes a number: every result is bit-identical to the same call made alone, with the
crew spinning or sleeping between calls.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from memloop.engine import kernels
from memloop.engine.kernels.attention import paged_attention
from memloop.engine.model.blocks import BLOCK_BYTES

from tests.engine.kernel_gate import needs_kernels

pytestmark = needs_kernels

ROOT = Path(__file__).resolve().parents[2]
IN, OUT = 576, 3000  # a decode-sized layer: many chunks, so every call has work to split


def _weights(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(OUT, IN // 32, BLOCK_BYTES["Q4_1"]), dtype=np.uint8)
    for at in (0, 2):  # finite f16 scale and offset
        raw[..., at : at + 2] = (
            (rng.standard_normal((OUT, IN // 32)) * 0.02).astype(np.float16).view(np.uint8).reshape(OUT, IN // 32, 2)
        )
    return raw.reshape(OUT, -1)


def _attention_inputs(seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    kvh, heads, hd, page_size, pages = 3, 9, 64, 16, 24
    k = rng.standard_normal((kvh, pages, page_size, hd)).astype(np.float32)
    v = rng.standard_normal((kvh, pages, page_size, hd)).astype(np.float32)
    tables = rng.permutation(pages)[None, :20].astype(np.int32)
    q = rng.standard_normal((1, 1, heads, hd)).astype(np.float32)
    return q, k, v, tables, np.asarray([[300]], np.int32)  # a batch-1 decode step: the crew-only split


_matmul = jax.jit(lambda x, w: kernels.qmatmul_many(x, [w[:2000], w[2000:]], "Q4_1"))
_attend = jax.jit(lambda q, k, v, t, p: paged_attention(q, k, v, t, p))


def _run(x: np.ndarray, w: np.ndarray, attn: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    kernels.load()  # also in the subprocess below, which imports this module without its fixtures
    y = np.concatenate([np.asarray(m) for m in _matmul(jnp.asarray(x), jnp.asarray(w))], axis=1)
    return y, np.asarray(_attend(*map(jnp.asarray, attn)))


def test_crew_results_match_the_reference_and_are_split():
    w = _weights(1)
    x = np.random.default_rng(2).standard_normal((1, IN)).astype(np.float32)
    before = kernels.splits()
    y, _ = _run(x, w, _attention_inputs(3))
    after = kernels.splits()
    dense = np.asarray(gguf_dequantize(w, GGMLQuantizationType.Q4_1), np.float64).reshape(OUT, IN)
    np.testing.assert_allclose(y, x.astype(np.float64) @ dense.T, rtol=1e-5, atol=1e-5)
    if (os.cpu_count() or 1) > 1:
        assert after.crew > before.crew, (before, after)


def test_concurrent_calls_give_each_call_its_own_numbers():
    """Four threads call the kernels at once, so most calls find the crew busy and go to XLA's pool
    (weights) or run alone (a decode step's attention); each result must equal its solo run."""
    cases = []
    for i in range(4):
        x = np.random.default_rng(10 + i).standard_normal((1 + 3 * i, IN)).astype(np.float32)
        w, attn = _weights(20 + i), _attention_inputs(30 + i)
        cases.append((x, w, attn, _run(x, w, attn)))
    before = kernels.splits()
    failures: list[str] = []

    def worker(case: int) -> None:
        x, w, attn, (y0, a0) = cases[case]
        for rep in range(25):
            y, a = _run(x, w, attn)
            if y.tobytes() != y0.tobytes() or a.tobytes() != a0.tobytes():
                failures.append(
                    f"case {case} rep {rep}: max |dy| {np.abs(y - y0).max()}, max |da| {np.abs(a - a0).max()}"
                )

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = kernels.splits()
    assert not failures, failures[:5]
    if (os.cpu_count() or 1) > 1:  # whichever call holds the crew counts a crew split; the rest is timing
        assert after.crew > before.crew, (before, after)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: XLA's pool has one thread and nothing is split")
def test_calls_that_find_the_crew_in_use_go_to_the_pool_or_run_alone_with_the_same_numbers():
    """The busy-crew paths taken on purpose (`crew_held`), not by threads that happen to overlap: the
    weight calls go to XLA's pool, the decode step's attention runs on its own thread, and each result
    equals the same call split by the crew."""
    x = np.random.default_rng(40).standard_normal((3, IN)).astype(np.float32)
    w, attn = _weights(41), _attention_inputs(42)
    y0, a0 = _run(x, w, attn)
    before = kernels.splits()
    with kernels.crew_held():
        y, a = _run(x, w, attn)
    after = kernels.splits()
    assert after.crew == before.crew, (before, after)  # no call got the held crew
    assert after.pool > before.pool and after.alone > before.alone, (before, after)
    assert y.tobytes() == y0.tobytes(), np.abs(y - y0).max()
    assert a.tobytes() == a0.tobytes(), np.abs(a - a0).max()


_SCRIPT = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from tests.engine.test_engine_kernel_crew import _run, _weights, _attention_inputs
x = np.random.default_rng(2).standard_normal((5, 576)).astype(np.float32)
y, a = _run(x, _weights(1), _attention_inputs(3))
np.savez(sys.argv[2], y=y, a=a)
"""


def test_a_sleeping_crew_gives_the_same_numbers(tmp_path):
    """MEMLOOP_KERNEL_SPIN_US=0: helpers sleep after every call and are woken for the next one."""
    out = tmp_path / "sleep.npz"
    env = {**os.environ, "MEMLOOP_KERNEL_SPIN_US": "0", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(ROOT), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    x = np.random.default_rng(2).standard_normal((5, IN)).astype(np.float32)
    y, a = _run(x, _weights(1), _attention_inputs(3))
    with np.load(out) as f:
        assert f["y"].tobytes() == y.tobytes() and f["a"].tobytes() == a.tobytes()


@pytest.mark.parametrize("value", ["-1", "fast", "1.5", "99999999"])
def test_a_bad_spin_setting_is_a_named_error(monkeypatch, value):
    monkeypatch.setenv("MEMLOOP_KERNEL_SPIN_US", value)
    with pytest.raises(kernels.KernelBuildError, match="MEMLOOP_KERNEL_SPIN_US must be a whole number"):
        kernels.spin_setting()
