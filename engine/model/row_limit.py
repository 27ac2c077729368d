"""The most rows one call sends to the CPU kernel on this host, chosen by measuring both paths here.

`blocks.KERNEL_MAX_ROWS` holds a limit per instruction set, measured on one host of each kind (a
Zen 3 for AVX2, a Zen 5 for AVX-512). Hosts with the same instruction set differ where it matters
for prefill: on an Intel Xeon with AVX-512 and AMX the crossover between the kernel and XLA's dot
need not be the Zen 5's. `measure_max_rows` times both paths on the model's own matrices at each
row count (interleaved, best of `repeat`, so load on a shared host hits both alike) and records the
largest row count up to which the kernel was never slower, per host (its CPU model and flags), in
the cache directory. `measured_max_rows()` is that record for this host, or `UNMEASURED`: then the
per-instruction-set table applies, so a host nobody measured keeps today's behaviour.

    memloop bench rows            # measures here and records the limit (prints both paths per row count)
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import time
from pathlib import Path
from typing import Any

UNMEASURED = "unmeasured"
ROWS = (64, 128, 256, 512)  # row counts measured: large decode batches up to the 512-token prefill chunk
# Up to this many rows the kernel always serves (it led XLA 1.8-2.2x at 32 rows on every host measured, and
# decode batches live there): a noisy measurement may move the prefill's path, never batch-1 decode's.
FLOOR = 32
_cache: dict[str, Any] = {}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def host_key() -> str:
    """This host's kind for the record: the kernels' instruction set, the CPU model and its flags."""
    from memloop.engine import kernels

    digest = hashlib.sha256((cpu_model() + " " + " ".join(sorted(kernels.cpu_flags()))).encode()).hexdigest()[:12]
    return f"{kernels.isa()}-{digest}"


def record_path() -> Path:
    from memloop.engine.assets import cache_root

    return cache_root() / "kernels" / f"max-rows-{host_key()}.json"


def measured_max_rows() -> int | None | str:
    """The limit measured on this host (None: the kernel at every row count measured and above), or UNMEASURED."""
    path = record_path()
    if str(path) not in _cache:
        try:
            _cache[str(path)] = json.loads(path.read_text())["max_rows"]
        except (OSError, ValueError, KeyError, TypeError):
            _cache[str(path)] = UNMEASURED
    return _cache[str(path)]


def _best(fn: Any, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def limit_from(dot_over_kernel: dict[int, float]) -> int | None:
    """The largest measured row count up to which the kernel was never slower than XLA's dot (FLOOR
    when it was slower at the first; None when it never was: the kernel at every row count)."""
    for n in sorted(dot_over_kernel):
        if dot_over_kernel[n] < 1.0:  # XLA's dot faster: the kernel serves fewer rows than this
            return max([m for m in dot_over_kernel if m < n], default=FLOOR)
    return None


def measure_max_rows(
    ws: list[Any],
    dequantize: Any,
    amx_min_rows: int | None = None,
    rows: tuple[int, ...] = ROWS,
    repeat: int = 5,
    write: bool = True,
    log: Any = print,
) -> dict[str, Any]:
    """Times `ws` (BlockMatrix, e.g. one layer's) through the kernel and through `dequantize`
    (blocks.dequantize) + XLA's dot at each row count; returns (and, with `write`, records for this host) the
    limit and the timings. The kernel runs as the engine calls it: on the AMX tiles from `amx_min_rows` rows
    (blocks.kernel_amx_min_rows()). Both come from blocks as arguments, because blocks reads this module's record."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from memloop.engine import kernels

    if not kernels.available():
        raise RuntimeError("the CPU kernels are not available here, so there is no crossover to measure")
    # each matrix gets an input of its own width (a layer's down projection reads the wider MLP activations)
    amx_rows = amx_min_rows
    kernel = jax.jit(
        lambda xs, raws: [
            kernels.qmatmul(x, r, w.qtype, amx=amx_rows is not None and x.shape[0] >= amx_rows)
            for x, r, w in zip(xs, raws, ws)
        ]
    )
    dot = jax.jit(
        lambda xs, raws: [
            jnp.einsum("ti,oi->to", x, dequantize(r, w.qtype, w.shape[1])) for x, r, w in zip(xs, raws, ws)
        ]
    )
    raws = [w.raw for w in ws]
    rng = np.random.default_rng(0)
    timings: dict[int, dict[str, float]] = {}
    for n in rows:
        xs = [jnp.asarray(rng.standard_normal((n, w.shape[1]), dtype=np.float32)) for w in ws]
        run_k = lambda: jax.block_until_ready(kernel(xs, raws))
        run_d = lambda: jax.block_until_ready(dot(xs, raws))
        run_k(), run_d()  # compile
        k_s, d_s = [], []
        for _ in range(repeat):  # interleaved: a burst of load on a shared host slows both alike
            k_s += _best(run_k, 1)
            d_s += _best(run_d, 1)
        timings[n] = {"kernel_s": min(k_s), "dot_s": min(d_s), "dot_over_kernel": min(d_s) / min(k_s)}
        log(
            f"{n:>4} rows: kernel {1e3 * min(k_s):.2f} ms, de-quantise + XLA dot {1e3 * min(d_s):.2f} ms "
            f"(kernel {min(d_s) / min(k_s):.2f}x)"
        )
    limit = limit_from({n: t["dot_over_kernel"] for n, t in timings.items()})
    record = {
        "host": host_key(),
        "cpu": cpu_model(),
        "max_rows": limit,
        "measured": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "matrices": [[w.qtype, *w.shape] for w in ws],
        "repeat": repeat,
        "timings": {str(k): v for k, v in timings.items()},
    }
    if write:
        path = record_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(path)
        _cache.pop(str(path), None)
    return record
