"""The wheel builds the CPU kernels: `pip install .` (what infra/Dockerfile runs for the cluster image)
ships the kernels' headers beside their sources, and a kernel change changes the run id.

Before, the package data listed `*.cc` but not `*.h`: an installed memloop could not compile
qmatmul.cc (it includes crew.h and vec16.h) and silently ran dense f32 weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.source_layout import checkout_copy


def build_wheel(tmp_path: Path) -> Path:
    """A wheel built from a copy of the sources (the checkout is left as it is)."""
    src = checkout_copy(tmp_path / "src")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next((tmp_path / "dist").glob("memloop-*.whl"))


@pytest.mark.slow  # builds a wheel and compiles the kernels from it (about a minute on 2 cores)
def test_the_wheel_ships_the_kernel_headers_and_compiles_the_kernels_from_an_install(tmp_path) -> None:
    from memloop.engine import kernels

    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for source in (*kernels.SOURCES, *kernels.HEADERS):
        assert f"memloop/engine/kernels/{source.name}" in names, f"{source.name} is not in the wheel"
    if kernels.unsupported_reason() is not None:
        pytest.skip(f"the wheel ships the kernels; compiling them here is not possible: {kernels.unsupported_reason()}")
    # a fresh install location, imported ahead of the checkout, with its own kernel cache
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    probe = (
        "import json, memloop.engine as engine, memloop.engine.kernels as k; k.load(); "
        "print(json.dumps({'engine': engine.__file__, 'so': str(k.library_path()), 'path': k.weight_path()}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MEMLOOP_KERNELS", "CXX")}
    env.update(PYTHONPATH=str(site), MEMLOOP_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["engine"].startswith(str(site))  # the installed copy, not the checkout
    assert Path(got["so"]).is_file() and got["so"].startswith(str(tmp_path / "cache"))  # built here, from it
    assert got["path"]["weights"] == "kernel" and got["path"]["isa"] in ("avx512", "avx2")


def test_a_kernel_header_change_changes_the_code_digest(tmp_path, monkeypatch) -> None:
    """The run id hashes the code digest: a changed vec16.h (the kernels' numerics) must change it."""
    from memloop.jobs.store import provenance

    for pkg in provenance.RESULT_PACKAGES:
        (tmp_path / pkg).mkdir()
    header = tmp_path / "engine" / "vec16.h"
    header.write_text("// lanes\n")
    (tmp_path / "engine" / "qmatmul.cc").write_text('#include "vec16.h"\n')
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    provenance.code_digest.cache_clear()
    try:
        before = provenance.code_digest()
        header.write_text("// lanes, reduced in another order\n")
        provenance.code_digest.cache_clear()
        assert provenance.code_digest() != before
    finally:
        provenance.code_digest.cache_clear()
