"""A broken kernel build fails; only a host that cannot have the kernels skips, and says why.

With a compiler that fails on a host whose CPU has the instructions, the kernel tests used to report
"skipped" (reason: the CPU's instructions) and pytest exited 0. Now they error with the compiler's
message, while the pure-JAX de-quantisation test (moved out of the kernel-gated module) still runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from memloop.engine import kernels

ROOT = Path(__file__).resolve().parents[2]
# a broken build is only told from a missing capability on a host that can have the kernels
CAPABLE_HOST = pytest.mark.skipif(kernels.unsupported_reason() is not None, reason=str(kernels.unsupported_reason()))


def test_the_reason_names_the_missing_instructions_or_compiler(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(kernels, "cpu_flags", lambda: {"sse2", "avx"})
    monkeypatch.setattr(kernels.platform, "machine", lambda: "x86_64")
    assert kernels.unsupported_reason() == (
        "the CPU kernels need x86-64 with avx2, fma, f16c; this CPU lacks avx2, fma, f16c"
    )
    monkeypatch.setattr(kernels, "cpu_flags", lambda: {"avx2", "fma", "f16c"})
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert "no C++ compiler (CXX=" in kernels.unsupported_reason() and "does not exist" in kernels.unsupported_reason()
    monkeypatch.delenv("CXX")
    monkeypatch.setattr(kernels.shutil, "which", lambda name: None)
    assert kernels.unsupported_reason() == "no C++ compiler (g++, c++ or clang++ on PATH); install one or set CXX"


def _broken_compiler(tmp_path: Path) -> Path:
    """A C++ compiler that answers --version and fails every compile: a broken build on a capable host."""
    cxx = tmp_path / "broken-cxx"
    cxx.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "broken-cxx 1.0"; exit 0; }\n'
        'echo "internal compiler error: broken on purpose" >&2\nexit 1\n'
    )
    cxx.chmod(0o755)
    return cxx


@CAPABLE_HOST
def test_a_failed_compile_on_a_capable_host_is_a_build_error_not_unsupported(monkeypatch, tmp_path) -> None:
    cxx = _broken_compiler(tmp_path)
    monkeypatch.setattr(kernels, "_state", {})
    monkeypatch.setenv("MEMLOOP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(cxx))
    with pytest.raises(kernels.KernelBuildError, match="internal compiler error") as info:
        kernels.load()
    assert not isinstance(info.value, kernels.KernelsUnsupported)
    assert kernels.weight_path() == {
        "weights": "dense",
        "isa": None,
        "why_dense": info.value.args[0].splitlines()[0][:300],
    }


@CAPABLE_HOST
def test_the_kernel_tests_fail_with_a_broken_compiler_and_the_dequantisation_test_runs(tmp_path) -> None:
    cxx = _broken_compiler(tmp_path)
    env = dict(os.environ, CXX=str(cxx), MEMLOOP_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    env.pop("MEMLOOP_KERNELS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "kernel_weights_are_bit_exact or in_graph_dequantisation",
            "tests/engine/test_engine_blocks.py",
            "tests/engine/test_block_dequantise.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\b7 passed\b", summary) and re.search(r"\b7 errors?\b", summary), summary
    assert "skipped" not in summary and "internal compiler error" in out


def test_the_engine_reports_which_weight_path_it_runs(smollm2_engine) -> None:
    """A run's engine stats (its provenance, `runs.stats_json`) say kernel or dense, and for what ISA."""
    from tests.engine.kernel_gate import kernels_expected

    stats = smollm2_engine.stats()
    if kernels_expected():
        assert (stats["weights"], stats["isa"], stats["why_dense"]) == ("kernel", kernels.isa(), None)
        if os.environ.get("MEMLOOP_KERNEL_ISA", "native") == "native":
            assert stats["isa"] == ("avx512" if {"avx512f", "avx512bw", "avx512vl"} <= kernels.cpu_flags() else "avx2")
    else:
        assert stats["weights"] == "dense" and stats["isa"] is None and stats["why_dense"]
