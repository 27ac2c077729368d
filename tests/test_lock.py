"""constraints.txt: the exact versions CI ran, used by the Makefile's install and refreshed by `make lock`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _pins(path: Path) -> dict[str, Version]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt line {line!r} is not an exact pin NAME==VERSION"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return reqs


def test_every_dependency_is_pinned_inside_its_range():
    pins = _pins(ROOT / "constraints.txt")
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} (pyproject.toml) has no pin in constraints.txt: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}: run `make lock`"
        )


def test_the_install_recipe_uses_the_lock():
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^\$\(STAMP\):(.*)\n((?:\t.*\n)+)", text, re.M)
    assert recipe and "constraints.txt" in recipe.group(1), "the install must re-run when the lock changes"
    installs = [ln for ln in recipe.group(2).splitlines() if "pip install" in ln and "--upgrade pip" not in ln]
    assert installs and all("-c constraints.txt" in ln for ln in installs), installs


def test_the_environment_holds_the_locked_versions():
    """What the tests run in is what the lock says (a drift means the lock was not refreshed)."""
    pins = _pins(ROOT / "constraints.txt")
    installed = {canonicalize_name(d.metadata["Name"]): Version(d.version) for d in metadata.distributions()}
    drift = {
        n: (str(v), str(installed[n])) for n, v in pins.items() if n in installed and Version(installed[n].public) != v
    }
    assert not drift, f"installed versions differ from constraints.txt (pinned, installed): {drift}"
    for req in _requirements():  # the lock is what is installed, not a list that misses what runs
        if req.marker is None:
            assert canonicalize_name(req.name) in installed, req.name


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lock_rewrites_the_lock_from_the_environment(tmp_path):
    out = tmp_path / "lock.txt"
    subprocess.run(
        ["make", "-s", "-o", ".venv/.memloop-installed", "lock", f"PY={sys.executable}", f"LOCK={out}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    fresh = _pins(out)
    assert "memloop" not in fresh  # the project itself is not a dependency
    assert all(not str(v).count("+") for v in fresh.values())  # local labels (+cpu) dropped
    committed = _pins(ROOT / "constraints.txt")
    assert {n: fresh.get(n) for n in committed} == committed, "`make lock` would change constraints.txt"
