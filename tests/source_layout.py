"""Copies of memloop's source for tests that change or build one (the checkout is never touched).

`installed_copy` lays the packages out as an install does -- `memloop/` with `engine/`, `eval/`, `jobs/` and
`bench/` inside it -- which is what import-linter walks (grimp reads a package's own folder, not setuptools'
package_dir mapping) and what a process sees ahead of the checkout with the copy first on PYTHONPATH.
`checkout_copy` keeps the repository's layout, with what a wheel build reads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("engine", "eval", "jobs", "bench")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "build_info.json")


def installed_copy(dest: Path, subpackages: tuple[str, ...] = SUBPACKAGES) -> Path:
    """`dest/memloop` holding memloop's own modules and the given subpackages; pyproject.toml (the import
    contracts) beside it. Returns `dest`."""
    shutil.copytree(ROOT / "memloop", dest / "memloop", ignore=_IGNORE)
    for name in subpackages:
        shutil.copytree(ROOT / name, dest / "memloop" / name, ignore=_IGNORE)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def checkout_copy(dest: Path) -> Path:
    """The repository's package folders and build files under `dest`, ready for `pip wheel`. Returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    for name in ("memloop", *SUBPACKAGES):
        shutil.copytree(ROOT / name, dest / name, ignore=_IGNORE)
    return dest
