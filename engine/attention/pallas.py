"""Decode attention through JAX's own Pallas paged-attention kernels, on memloop's page pools as they are.

The serving step's attention (`memloop.engine.attention.paged.paged_attend`) gathers each row's pages into a dense
copy per layer per step; on an accelerator that multiplies the KV bytes a decode step reads, which
is what bounds decoding. JAX ships kernels that read the pages in place through the block table:

* TPU: `jax.experimental.pallas.ops.tpu.paged_attention.paged_attention`
  (q [B, H, hd], pages [KV heads, pages, page_size, hd], lengths [B], page_indices [B, pages/seq];
  `pages_per_compute_block` must divide pages/seq). It loads K/V as bf16 whatever the pool dtype.
* GPU: `jax.experimental.pallas.ops.gpu.paged_attention.paged_attention`
  (q, k_pages, v_pages, block_tables, lengths; pages/seq divisible by `k_splits`, `block_h` a
  multiple of 16).

Both take memloop's KV-head-major pools `[KV heads, pages, page_size, hd]` and block tables
unchanged (checked with JAX 0.10.2), so no second copy of the cache exists. Neither scales the
scores, so the queries are scaled by 1/sqrt(hd) first. Both serve decoding only (one query token per
row, keys [0, length)); prefill chunks, layers with a sliding window and soft-capped attention keep
the gather path (logged once by name). On CPU the kernels run in Pallas' interpreter
(`pallas_interpret`, for tests: slow), never by default; CPU decoding reads the pages in place
through memloop's own C++ kernel instead (`memloop.engine.kernels.attention`, the IN_PLACE backend).

Under a `tp` mesh the kernel runs per device through `shard_map` over KV heads (each device's query
heads are exactly those of its KV heads, since query head h belongs to KV head h // group);
where the device count does not divide the KV heads the pools are replicated (memloop.engine.model.mesh), and so
is the kernel's work.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P
from memloop.engine.cache.kv_pages import is_quantized, write_pages
from memloop.engine.engine_config import ATTENTION_BACKENDS as BACKENDS
from memloop.engine.errors import EngineError
from memloop.engine.model.decoder import AttendFn
from memloop.engine.model.mesh import AXIS

log = logging.getLogger(__name__)

KERNELS = {"pallas-tpu": "tpu", "pallas-gpu": "gpu"}  # backend -> the platform that runs it natively
AUTO = {"tpu": "pallas-tpu", "gpu": "pallas-gpu"}  # platform -> what `auto` picks (anything else: gather)

# Keys per compute block the kernels walk at once: one 128-lane tile of scores on TPU, a Triton block.
TPU_KEYS_PER_BLOCK = 128
GPU_PAGES_PER_BLOCK = 8
GPU_K_SPLITS = 16
GPU_BLOCK_H = 16


class AttentionBackendError(EngineError):
    """An attention backend was asked for that this platform (or this configuration) cannot run."""


@dataclass(frozen=True)
class AttentionBackend:
    """The resolved backend (hashable: a static argument of the jitted engine step).

    kind: "gather" (dense gather + XLA, the reference), "pallas-tpu" or "pallas-gpu".
    interpret: run the kernel in Pallas' interpreter (CPU checks of the accelerator kernels).
    in_place: (gather kind) decode steps and prefill chunks on CPU read the pages in place through the C++ kernel
        (`memloop.engine.attention.paged.in_place_attend`) where the model, layer and process allow it
        (`memloop.engine.kernels.attention.enabled`: MEMLOOP_PAGED_KERNEL=0 turns it off); what `auto` is on CPU.
    """

    kind: str = "gather"
    interpret: bool = False
    in_place: bool = False

    @property
    def kernel(self) -> bool:
        """A Pallas kernel serves decode calls (per-layer pools read in place on the accelerator)."""
        return self.kind != "gather"


GATHER = AttentionBackend()  # `attention: gather`: every call gathers, no kernel
IN_PLACE = AttentionBackend(in_place=True)  # `auto` on CPU: every call through the C++ kernel where it applies


def platform() -> str:
    """JAX's default backend: "cpu", "gpu" (CUDA or ROCm) or "tpu"."""
    return jax.default_backend()


def resolve_backend(requested: str | None = "auto", interpret: bool = False, on: str | None = None) -> AttentionBackend:
    """The backend for `requested` on platform `on` (default: this process's), or a named error.

    `auto` picks the platform's kernel (TPU, GPU); on CPU the gather path with decode steps and prefill
    chunks read in place by the C++ kernel (IN_PLACE), elsewhere the gather path. `gather` is the gather path with
    no kernel at all. A kernel asked for on another platform is an `AttentionBackendError` unless
    `interpret` runs it in the interpreter.
    """
    requested = requested or "auto"
    on = on or platform()
    if requested not in BACKENDS:
        raise AttentionBackendError(f"engine setting `attention` must be one of {list(BACKENDS)}; got {requested!r}")
    if requested == "auto":
        if interpret:
            raise AttentionBackendError(
                "`pallas_interpret` runs a named kernel in the interpreter; set `attention` "
                "to pallas-tpu or pallas-gpu with it (auto picks by platform)"
            )
        if on in AUTO:
            return AttentionBackend(AUTO[on])
        return IN_PLACE if on == "cpu" else GATHER
    if requested == "gather":
        return GATHER
    native = KERNELS[requested]
    if on != native and not interpret:
        raise AttentionBackendError(
            f"attention backend {requested!r} is a {native.upper()} kernel and this process runs on {on!r}; use "
            f"`attention: auto` (or gather) here, or set `pallas_interpret: true` to run the kernel in Pallas' "
            "interpreter on CPU (for checks only: it is slow)"
        )
    return AttentionBackend(requested, bool(interpret))


def pages_per_block(pages_per_seq: int, target: int) -> int:
    """The largest divisor of the block table's width not above `target` pages (the kernels need one)."""
    return max(d for d in range(1, min(pages_per_seq, max(1, target)) + 1) if pages_per_seq % d == 0)


def decode_attention(
    backend: AttentionBackend,
    q: jax.Array,
    k_pool: jax.Array,
    v_pool: jax.Array,
    lengths: jax.Array,
    block_tables: jax.Array,
) -> jax.Array:
    """Softmax attention of one query token per row over its first `lengths[b]` paged keys.

    q [B, H, hd]; k_pool/v_pool [KV heads, pages, page_size, hd] (one layer's pool, read in place);
    lengths i32[B]; block_tables i32[B, pages/seq]. Returns [B, H, hd] in q's dtype. Under an active
    `tp` mesh the kernel runs per device over its share of the KV heads.
    """
    hd = q.shape[-1]
    # The kernels do not scale the scores; 1/sqrt(hd) is exact in any dtype for hd a power of 4.
    q = (q.astype(jnp.float32) * (hd**-0.5)).astype(q.dtype)
    lengths = lengths.astype(jnp.int32)
    block_tables = block_tables.astype(jnp.int32)
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or AXIS not in mesh.axis_names:
        return _kernel(backend, q, k_pool, v_pool, lengths, block_tables)
    heads = AXIS if k_pool.shape[0] % mesh.shape[AXIS] == 0 else None  # as memloop.engine.model.mesh.cache_spec splits
    pool = P(heads, None, None, None)
    per_device = jax.shard_map(
        lambda *a: _kernel(backend, *a),
        mesh=mesh,
        in_specs=(P(None, heads, None), pool, pool, P(), P()),
        out_specs=P(None, heads, None),
        check_vma=False,
    )
    return per_device(q, k_pool, v_pool, lengths, block_tables)


def _kernel(
    backend: AttentionBackend,
    q: jax.Array,
    k_pool: jax.Array,
    v_pool: jax.Array,
    lengths: jax.Array,
    block_tables: jax.Array,
) -> jax.Array:
    pages_per_seq = block_tables.shape[1]
    page_size = k_pool.shape[2]
    if backend.kind == "pallas-tpu":
        from jax.experimental.pallas import tpu as pltpu
        from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

        block = pages_per_block(pages_per_seq, max(1, TPU_KEYS_PER_BLOCK // page_size))
        call = lambda: paged_attention(
            q,
            k_pool,
            v_pool,
            lengths,
            block_tables,  # noqa: E731
            pages_per_compute_block=block,
        )
        if backend.interpret:  # the interpreter is chosen while the pallas_call is traced
            with pltpu.force_tpu_interpret_mode():
                return call()
        return call()
    if backend.kind == "pallas-gpu":
        from jax.experimental.pallas.ops.gpu.paged_attention import paged_attention

        splits = math.gcd(pages_per_seq, GPU_K_SPLITS)
        block = pages_per_block(pages_per_seq // splits, GPU_PAGES_PER_BLOCK)
        return paged_attention(
            q,
            k_pool,
            v_pool,
            block_tables,
            lengths,
            block_h=GPU_BLOCK_H,
            pages_per_compute_block=block,
            k_splits=splits,
            interpret=backend.interpret,
        )
    raise AttentionBackendError(f"{backend.kind!r} is not a kernel backend")


_logged: set[tuple[str, str]] = set()


def _fallback(backend: AttentionBackend, reason: str) -> None:
    """Say once per backend and reason which attention calls keep the gather path (at trace time)."""
    if (backend.kind, reason) not in _logged:
        _logged.add((backend.kind, reason))
        log.info("attention backend %s: %s use the gather path", backend.kind, reason)


def kernel_attend(
    gather: AttendFn,
    backend: AttentionBackend,
    slot_pages: jax.Array,
    slot_offsets: jax.Array,
    block_tables: jax.Array,
    positions: jax.Array,
) -> AttendFn:
    """`gather`'s attention with decode calls served by `backend`'s kernel.

    A call with one query token per row and no attention option (sliding window, soft-capping: the
    kernels have neither in memloop's form) writes the new keys/values into their pages exactly as
    the gather path does, then attends through the kernel over the layer's pool in place. Every other
    call is `gather`'s own. The key length of a row is its position + 1 (its keys are positions
    0..p of its block table); padded rows attend the scratch page.
    """

    def attend(q, k, v, cache, layer, **options):
        if q.shape[1] != 1:
            _fallback(backend, "prefill chunks (more than one query token per row)")
            return gather(q, k, v, cache, layer, **options)
        if any(value is not None for value in options.values()):
            _fallback(backend, f"layers with {', '.join(sorted(k for k, x in options.items() if x is not None))}")
            return gather(q, k, v, cache, layer, **options)
        if is_quantized(cache):
            _fallback(backend, "int8 KV caches (the Pallas kernels read float pools)")
            return gather(q, k, v, cache, layer, **options)
        cache = write_pages(cache, layer, slot_pages, slot_offsets, k, v)
        out = decode_attention(
            backend, q[:, 0], cache["k"][layer], cache["v"][layer], positions[:, 0] + 1, block_tables
        )
        return out[:, None], cache

    return attend
