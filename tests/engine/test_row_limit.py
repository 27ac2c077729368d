"""The kernel's row limit chosen by measurement on this host (memloop.engine.model.row_limit): both
paths timed on real block matrices, the crossover recorded per host, and the engine following it."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from memloop.engine import kernels
from memloop.engine.model import blocks, row_limit
from memloop.engine.model.blocks import BlockMatrix, kernel_max_rows, kernel_max_rows_source, matmul_path

from tests.engine.block_data import random_blocks

pytestmark = pytest.mark.skipif(not kernels.available(), reason="the CPU kernels are not available here")


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A cache directory of the test's own: a record written here changes no other process's engine."""
    monkeypatch.setenv("MEMLOOP_CACHE", str(tmp_path))
    monkeypatch.setattr(row_limit, "_cache", {})
    return tmp_path


def test_an_unmeasured_host_keeps_its_instruction_sets_limit(own_cache):
    assert row_limit.measured_max_rows() == row_limit.UNMEASURED
    assert kernel_max_rows() == blocks.KERNEL_MAX_ROWS[blocks.host_kind()]
    assert kernel_max_rows_source().startswith("table for ")


def test_the_limit_measured_on_this_host_decides_each_calls_path(own_cache):
    """`measure_max_rows` times both paths on real matrices, records the crossover for this host, and
    the engine's path choice follows the record from then on (the table before)."""
    rng = np.random.default_rng(2)
    # matrices of two widths, as a layer has (its down projection reads the wider MLP activations)
    ws = [
        BlockMatrix(jnp.asarray(random_blocks(rng, q, 64, cols)), q, (64, cols))
        for q, cols in (("Q4_1", 256), ("Q8_0", 512))
    ]
    record = row_limit.measure_max_rows(
        ws, blocks.dequantize, blocks.kernel_amx_min_rows(), rows=(64, 128), repeat=1, log=lambda _: None
    )
    assert set(record["timings"]) == {"64", "128"} and all(
        t["kernel_s"] > 0 and t["dot_s"] > 0 for t in record["timings"].values()
    )
    assert record["max_rows"] == row_limit.limit_from(
        {int(k): t["dot_over_kernel"] for k, t in record["timings"].items()}
    )
    saved = json.loads(row_limit.record_path().read_text())
    assert saved["host"] == row_limit.host_key() and saved["matrices"] == [["Q4_1", 64, 256], ["Q8_0", 64, 512]]
    assert kernel_max_rows() == record["max_rows"] and kernel_max_rows_source().startswith("measured on this host")
    # a host whose measurement put the crossover at 512 rows sends the 512-row prefill chunk to the kernel
    row_limit.record_path().write_text(json.dumps({**saved, "max_rows": 512}))
    row_limit._cache.clear()
    assert [matmul_path(n) for n in (1, 128, 512, 513)] == ["kernel"] * 3 + ["dequant-dot"]
    row_limit.record_path().write_text(json.dumps({**saved, "max_rows": None}))
    row_limit._cache.clear()
    assert matmul_path(4096) == "kernel"


def test_the_crossover_is_the_last_row_count_where_the_kernel_was_never_slower() -> None:
    assert row_limit.limit_from({64: 1.5, 128: 1.1, 256: 0.9, 512: 1.2}) == 128
    assert row_limit.limit_from({64: 1.5, 128: 1.1, 256: 1.0, 512: 1.3}) is None  # never slower: every row count
    assert row_limit.limit_from({64: 0.8, 128: 1.2}) == row_limit.FLOOR  # decode batches keep the kernel


def test_an_avx512_host_with_amx_tiles_is_a_kind_of_its_own_whose_prefill_chunks_take_the_kernel() -> None:
    """On an Intel Xeon with AMX, XLA's dot was measured slower than the kernel at every row count up to
    the 512-row prefill chunk (a Zen 5's AVX-512 crossed at 128), and the kernel's AMX tiles, from 64
    rows, faster again: the table keys both kinds apart."""
    assert blocks.host_kind("avx512", {"avx512f", "amx_tile", "amx_bf16"}) == "avx512-amx"
    assert blocks.host_kind("avx512", {"avx512f"}) == "avx512"
    assert blocks.host_kind("avx2", {"avx2", "amx_tile"}) == "avx2"  # MEMLOOP_KERNEL_ISA=avx2 keeps AVX2's limit
    assert blocks.KERNEL_MAX_ROWS["avx512-amx"] is None  # the kernel (its AMX tiles) at every row count
    assert blocks.KERNEL_AMX_MIN_ROWS == {"avx512-amx": 64}  # the only kind with tiles; decode batches below
    assert blocks.KERNEL_MAX_ROWS["avx512"] == 128 and blocks.KERNEL_MAX_ROWS["avx2"] == 64  # AMD hosts unchanged
