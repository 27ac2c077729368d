"""When a kernel test may skip: only where this host cannot have the CPU kernels (its CPU lacks the
instructions, or no C++ compiler is installed) or they are turned off, with that reason. On a host
that can have them a failed build is a failure: `built_kernels` (tests/engine/conftest.py) and
`kernels_expected` build them and raise the compiler's error instead of skipping."""

from __future__ import annotations

import os

import pytest
from memloop.engine import kernels


def skip_reason() -> str | None:
    """Why the kernel tests cannot run here, or None when they must."""
    if os.environ.get("MEMLOOP_KERNELS", "1") == "0":
        return "the CPU kernels are turned off (MEMLOOP_KERNELS=0)"
    return kernels.unsupported_reason()


# The mark of a module whose every test needs the kernels: skipped with the reason, or run with them built.
needs_kernels = [
    pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason())),
    pytest.mark.usefixtures("built_kernels"),
]


def kernels_expected() -> bool:
    """For a test that also checks the kernel path where there is one: False where this host cannot
    have the kernels; True once they are built; a failed build raises KernelBuildError."""
    if skip_reason() is not None:
        return False
    kernels.load()
    return True
