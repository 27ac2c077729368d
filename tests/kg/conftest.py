"""Fixtures of the knowledge-graph tests."""
from __future__ import annotations


def _real_datasets_package() -> None:
    """Make `import datasets` mean the Hugging Face package (sentence-transformers imports it).

    tests/datasets/ is a package named `datasets` on pytest's rootdir path and shadows the real one;
    the test modules already imported from it keep working after the swap.
    """
    import importlib
    import sys
    from pathlib import Path

    tests_dir = Path(__file__).resolve().parents[1]
    mod = sys.modules.get("datasets")
    if mod is not None and not str(getattr(mod, "__file__", "") or "").startswith(str(tests_dir)):
        return
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != tests_dir]
    shadow = sys.modules.pop("datasets", None)
    try:
        importlib.import_module("datasets")
    except ImportError:
        if shadow is not None:
            sys.modules["datasets"] = shadow
    finally:
        sys.path[:] = saved


_real_datasets_package()
