"""Fixtures of the judge tests."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[1]


def _import_real_datasets() -> None:
    """sentence-transformers imports Hugging Face `datasets`; with tests/ on sys.path (pytest's default
    import mode) the test package tests/datasets shadows it. Import the real one first."""
    mod = sys.modules.get("datasets")
    if mod is not None and Path(getattr(mod, "__file__", "") or "").resolve().parent.parent != _TESTS:
        return
    saved_path = sys.path[:]
    shadow = {k: v for k, v in sys.modules.items() if k == "datasets" or k.startswith("datasets.")}
    for k in shadow:
        del sys.modules[k]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _TESTS]
    try:
        importlib.import_module("datasets")
    finally:
        sys.path[:] = saved_path
        for k, v in shadow.items():  # keep already-collected test modules importable by name
            if k != "datasets":
                sys.modules.setdefault(k, v)


_import_real_datasets()
