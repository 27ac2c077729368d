"""The engine's bottom floor (imports no other floor; `memloop.engine.assets` for the build cache): CPU
kernels compiled on first use and called from jitted code as XLA FFI custom calls.

`qmatmul(x, blocks, qtype)` multiplies by a weight matrix kept in its GGUF block form (Q4_0, Q4_1,
Q5_0, Q8_0, and the k-quants Q4_K, Q5_K, Q6_K), reading 0.56-1.06 bytes per weight instead of f32's 4
(see qmatmul.cc for why and how). `memloop.engine.kernels.attention.paged_attention` attends over a paged KV
cache (f32, f16 or int8 with per-token scales) reading each page in place (paged_attention.cc).

The C++ sources are built with the machine's C++ compiler into memloop's cache directory, keyed by the
source, the compiler and the CPU's features, so a new machine or a changed source rebuilds it. It
needs x86-64 with AVX2, FMA and F16C, and uses AVX-512 (F, BW, VL) where the CPU has it (vec16.h keeps
the results bit-identical between the two); `available()` is False elsewhere (or when the build
fails, or `MEMLOOP_KERNELS=0`) and the engine then keeps f32 weights and XLA's own dot.

Two kinds of "not available" are told apart: a host that cannot have the kernels (`unsupported_reason`:
not x86-64, a CPU without the instructions, no C++ compiler; `KernelsUnsupported`) and a build that
failed on a host that can (a compile or link error, a library that does not load: `KernelBuildError`).
The engine falls back to dense f32 weights either way, and says so in the log and in the run's
provenance (`weight_path`); the test suite skips only the first and fails on the second.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

log = logging.getLogger(__name__)

TARGET = "memloop_qmatmul"
MANY_TARGET = "memloop_qmatmul_many"
MAX_MATRICES = 8  # matrices one `qmatmul_many` call takes (qmatmul.cc kMaxMatrices)
ATTENTION_TARGET = "memloop_paged_attention"
SOURCES = (Path(__file__).with_name("qmatmul.cc"), Path(__file__).with_name("paged_attention.cc"))
HEADERS = (
    Path(__file__).with_name("vec16.h"),
    Path(__file__).with_name("crew.h"),
)  # part of the build key: a changed header rebuilds
QTYPES = {"Q4_0": 0, "Q4_1": 1, "Q8_0": 2, "Q5_0": 3, "Q4_K": 4, "Q5_K": 5, "Q6_K": 6}
# AVX-512 (F, BW, VL) where the CPU has it, else AVX2 with FMA (vec16.h: the same results either way).
NATIVE_FLAGS = ("avx512f", "avx512bw", "avx512vl", "f16c")
REQUIRED_FLAGS = ("avx2", "fma", "f16c")

_lock = threading.Lock()
_state: dict[str, Any] = {}


class KernelBuildError(RuntimeError):
    """The CPU kernels could not be built or loaded; the message says why."""


class KernelsUnsupported(KernelBuildError):
    """This host cannot have the CPU kernels (not x86-64, missing instructions, no C++ compiler)."""


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


# MEMLOOP_KERNEL_ISA: "native" (the default: the compiler targets this CPU, AVX-512 where it has it)
# or "avx2" (x86-64-v3: the AVX2 kernels even on an AVX-512 CPU, e.g. to check that both give the
# same numbers, or for one build shared by hosts of both kinds).
ISA_TARGETS = {"native": "-march=native", "avx2": "-march=x86-64-v3"}


def isa_setting() -> str:
    """MEMLOOP_KERNEL_ISA, checked (a KernelBuildError names the valid values)."""
    value = os.environ.get("MEMLOOP_KERNEL_ISA", "native")
    if value not in ISA_TARGETS:
        raise KernelBuildError(
            f"MEMLOOP_KERNEL_ISA must be one of {sorted(ISA_TARGETS)}, got {value!r}; unset it to build for this CPU"
        )
    return value


# MEMLOOP_KERNEL_SPIN_US: how long (microseconds) the kernels' helper threads keep spinning for the
# next call before they sleep (crew.h; default 1000, 0 sleeps at once: less CPU on a shared host,
# slower batch-1 decode).
SPIN_DEFAULT_US = 1000


def spin_setting() -> int:
    """MEMLOOP_KERNEL_SPIN_US, checked (a KernelBuildError says what it takes)."""
    value = os.environ.get("MEMLOOP_KERNEL_SPIN_US", str(SPIN_DEFAULT_US))
    if not value.isdigit() or int(value) > 10_000_000:
        raise KernelBuildError(
            f"MEMLOOP_KERNEL_SPIN_US must be a whole number of microseconds from 0 to 10000000, "
            f"got {value!r}; unset it for the default ({SPIN_DEFAULT_US})"
        )
    return int(value)


@dataclass(frozen=True)
class Splits:
    """How the kernel calls with work to split were split so far in this process (crew.h)."""

    crew: int  # by the kernels' own spinning threads
    pool: int  # by XLA's pool, the crew being in use by another call
    alone: int  # by the calling thread alone, the crew being in use and the call too small for the pool


def splits() -> Splits:
    """The counts behind `Splits` (the kernels must be loaded)."""
    load()
    out = (ctypes.c_int64 * 3)()
    _state["lib"].memloop_kernel_splits(out)
    return Splits(*out)


@contextlib.contextmanager
def crew_held() -> Iterator[None]:
    """Inside the block the kernels' crew is in use by another thread, as if a call of another engine
    held it: calls with work to split go to XLA's pool or run alone (`Splits.pool`, `Splits.alone`),
    whatever the timing. For tests and diagnostics."""
    load()
    flags = (ctypes.c_int32 * 2)()  # [held, release]
    holder = threading.Thread(target=_state["lib"].memloop_kernel_hold_crew, args=(flags,), daemon=True)
    holder.start()
    while not flags[0]:  # the holder takes the crew's lock at once unless a call is running
        holder.join(0.001)
    try:
        yield
    finally:
        flags[1] = 1
        holder.join()


# bf16 tile products per f32-level multiply-add on the AMX path (qmatmul.cc: x and the weights in three bf16
# pieces each, the six products whose pieces' orders add up to at most 2)
AMX_PRODUCTS = 6


def amx_ready() -> bool:
    """Whether the kernels' AMX tile path can run here: built for a CPU with AMX-TILE and AMX-BF16 (Intel
    Sapphire Rapids and later), and Linux granted this process the tile state (qmatmul.cc)."""
    load()
    return bool(_state["lib"].memloop_kernel_amx_ready())


def amx_peak_gmacs(seconds: float = 0.2) -> float:
    """The AMX tile unit's bf16 multiply-add rate here (GMAC/s, all cores: one thread each, resident tiles, no
    memory traffic), the ceiling of the kernel's AMX path; 0.0 where that path cannot run."""
    load()
    if not amx_ready():
        return 0.0
    lib = _state["lib"]
    lib.memloop_kernel_amx_peak.restype = ctypes.c_double
    lib.memloop_kernel_amx_peak.argtypes = [ctypes.c_int64]
    rounds = max(1, int(seconds * 2e7))  # a round is ~64 cycles at ~16 per TDPBF16PS
    best = 0.0
    for _ in range(3):  # the best of three: a shared host's bursts only slow it
        rates: list[float] = []
        threads = [
            threading.Thread(target=lambda: rates.append(lib.memloop_kernel_amx_peak(rounds)))
            for _ in range(os.cpu_count() or 1)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best = max(best, sum(rates) / 1e9)
    return best


def isa() -> str:
    """The instruction set the kernels are built for here: "avx512" or "avx2" (vec16.h)."""
    native = all(f in cpu_flags() for f in NATIVE_FLAGS)
    return "avx512" if native and isa_setting() == "native" else "avx2"


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def unsupported_reason() -> str | None:
    """Why this host cannot have the CPU kernels at all (its CPU or its missing compiler), or None when
    it can: then a build that fails is a broken build, not a missing capability."""
    missing = [f for f in REQUIRED_FLAGS if f not in cpu_flags()]
    if platform.machine() not in ("x86_64", "AMD64") or missing:
        return (
            f"the CPU kernels need x86-64 with {', '.join(REQUIRED_FLAGS)}; "
            f"this CPU lacks {', '.join(missing) or 'x86-64 (it is ' + platform.machine() + ')'}"
        )
    cxx = _compiler()
    if cxx is None or (os.sep in cxx and not Path(cxx).is_file()) or (os.sep not in cxx and shutil.which(cxx) is None):
        return (
            f"no C++ compiler ({'CXX=' + cxx + ' does not exist' if cxx else 'g++, c++ or clang++ on PATH'}); "
            "install one or set CXX"
        )
    return None


def weight_path() -> dict[str, Any]:
    """Which weight path this process runs, for provenance and benchmarks: {"weights": "kernel" (block-form
    matrices through the CPU kernels) or "dense" (f32 weights, XLA's dot), "isa": what the kernels are
    built for ("avx512" or "avx2"; None when dense), "why_dense": the reason when dense}."""
    if available():
        return {"weights": "kernel", "isa": isa(), "why_dense": None}
    if os.environ.get("MEMLOOP_KERNELS", "1") == "0":
        why = "turned off (MEMLOOP_KERNELS=0)"
    else:
        why = _state.get("error") or unsupported_reason() or "unknown"
    return {"weights": "dense", "isa": None, "why_dense": why.splitlines()[0][:300]}


def _flags() -> list[str]:
    """The compiler flags of a build (part of its key). -ffp-contract=off: only explicit FMAs fuse (vec16.h)."""
    return [
        "-O3",
        ISA_TARGETS[isa_setting()],
        "-mtune=native",
        "-std=c++17",
        "-shared",
        "-fPIC",
        "-fno-math-errno",
        "-ffp-contract=off",
    ]


def _build(cxx: str, out: Path) -> None:
    import jax

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        so = Path(tmp) / out.name
        cmd = [cxx, *_flags(), f"-I{jax.ffi.include_dir()}", *map(str, SOURCES), "-o", str(so)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise KernelBuildError(
                f"building {', '.join(x.name for x in SOURCES)} failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}"
            )
        os.replace(so, out)  # atomic: a concurrent process sees the old file or the whole new one


def library_path() -> Path:
    """Where the compiled kernels for this source, compiler and CPU live (built if missing)."""
    from memloop.engine.assets import cache_root

    reason = unsupported_reason()
    if reason is not None:
        raise KernelsUnsupported(reason + ".")
    cxx = _compiler()
    assert cxx is not None  # unsupported_reason checked it
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256()
    for part in (
        *(x.read_bytes() for x in (*SOURCES, *HEADERS)),
        version.encode(),
        " ".join(sorted(cpu_flags())).encode(),
        platform.machine().encode(),
        " ".join(_flags()).encode(),
    ):
        key.update(part)
    path = cache_root() / "kernels" / f"qmatmul-{key.hexdigest()[:16]}.so"
    if not path.is_file():
        _build(cxx, path)
    return path


def load() -> None:
    """Build (if needed), load and register the kernels with XLA; raises KernelBuildError."""
    import jax

    with _lock:
        if _state.get("loaded"):
            return
        if "error" in _state:
            raise (KernelsUnsupported if _state.get("unsupported") else KernelBuildError)(_state["error"])
        try:
            spin_setting()
            lib = ctypes.cdll.LoadLibrary(str(library_path()))
            jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.MemloopQMatmul), platform="cpu")
            jax.ffi.register_ffi_target(MANY_TARGET, jax.ffi.pycapsule(lib.MemloopQMatmulMany), platform="cpu")
            jax.ffi.register_ffi_target(ATTENTION_TARGET, jax.ffi.pycapsule(lib.MemloopPagedAttention), platform="cpu")
            for suffix, symbol in (("_f16", lib.MemloopPagedAttentionF16), ("_q8", lib.MemloopPagedAttentionQ8)):
                jax.ffi.register_ffi_target(ATTENTION_TARGET + suffix, jax.ffi.pycapsule(symbol), platform="cpu")
        except KernelsUnsupported as exc:
            _state["error"] = str(exc)
            _state["unsupported"] = True
            raise
        except (KernelBuildError, OSError) as exc:
            _state["error"] = str(exc)
            raise KernelBuildError(str(exc)) from exc
        _state["lib"] = lib
        _state["loaded"] = True


def available() -> bool:
    """True when the CPU kernels are usable here (and not turned off with MEMLOOP_KERNELS=0)."""
    if os.environ.get("MEMLOOP_KERNELS", "1") == "0":
        return False
    try:
        load()
    except KernelsUnsupported as exc:
        if not _state.get("warned"):
            log.warning("memloop CPU kernels unavailable, using f32 weights: %s", exc)
            _state["warned"] = True
        return False
    except KernelBuildError as exc:  # this host can have them: the build itself is broken
        if not _state.get("warned"):
            log.error(
                "memloop CPU kernels failed to build on a CPU that supports them, using f32 weights "
                "(slower); fix the compiler or set CXX: %s",
                exc,
            )
            _state["warned"] = True
        return False
    return True


def qmatmul(x: Any, blocks: Any, qtype: str, amx: bool = False) -> Any:
    """x [..., in] f32 times the block matrix `blocks` (uint8 [out, in/block weights * block bytes]) transposed:
    [..., out] f32. Call inside or outside jit, on the CPU backend, after `load()`. `amx`: through the AMX
    tiles where they can run (`amx_ready()`; f32-level agreement with the vector path, not bit for bit),
    else the vector path."""
    import jax
    import jax.numpy as jnp

    lead, d_in = x.shape[:-1], x.shape[-1]
    d_out = blocks.shape[0]
    rows = int(np.prod(lead)) if lead else 1
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((rows, d_out), jnp.float32))
    y = call(x.reshape(rows, d_in).astype(jnp.float32), blocks, qtype=np.int32(QTYPES[qtype]), amx=np.int32(amx))
    return y.reshape(*lead, d_out)


def qmatmul_many(x: Any, blocks: Sequence[Any], qtype: str, amx: bool = False) -> list[Any]:
    """`[qmatmul(x, b, qtype) for b in blocks]` in one kernel call (1 to MAX_MATRICES matrices of one
    block type and width): a layer's matrices that share their input (q, k, v; gate, up) cost one
    call and one hand-off to the helper threads. Every output is bit-identical to its own `qmatmul`."""
    import jax
    import jax.numpy as jnp

    if not 1 <= len(blocks) <= MAX_MATRICES:
        raise ValueError(f"qmatmul_many takes 1 to {MAX_MATRICES} matrices, got {len(blocks)}")
    lead, d_in = x.shape[:-1], x.shape[-1]
    rows = int(np.prod(lead)) if lead else 1
    call = jax.ffi.ffi_call(MANY_TARGET, [jax.ShapeDtypeStruct((rows, b.shape[0]), jnp.float32) for b in blocks])
    ys = call(x.reshape(rows, d_in).astype(jnp.float32), *blocks, qtype=np.int32(QTYPES[qtype]), amx=np.int32(amx))
    return [y.reshape(*lead, b.shape[0]) for y, b in zip(ys, blocks)]
