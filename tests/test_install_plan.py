"""The install plan of `make install` on a fresh machine: resolved against PyPI, every package pinned in
constraints.txt.

pip resolves the Makefile's own install commands (`make -n`) in one dry run (`--dry-run --report`), with the machine's
pip configuration set aside, so what it sees is plain PyPI plus the indexes the Makefile names. A package in the plan
that constraints.txt does not pin exactly (PyPI's CUDA build of torch brings about 17 such) fails the test.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from tests.test_lock import _pins

ROOT = Path(__file__).resolve().parents[1]
PYPI = "https://pypi.org/simple/pip/"
pytestmark = [pytest.mark.timeout(900), pytest.mark.skipif(shutil.which("make") is None, reason="needs make")]


def _reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=15):
            return True
    except (urllib.error.URLError, OSError):
        return False


def _install_commands() -> list[list[str]]:
    """The pip arguments of each `pip install` the install recipe runs (not the pip upgrade)."""
    out = subprocess.run(
        ["make", "-n", "-B", "install", "PY=python"], cwd=ROOT, check=True, capture_output=True, text=True, timeout=60
    ).stdout
    commands = []
    for line in out.splitlines():
        words = shlex.split(line)
        if "pip" in words and "install" in words and "--upgrade" not in words:
            commands.append(words[words.index("install") + 1 :])
    assert commands, out
    return commands


def _parse(commands: list[list[str]]) -> tuple[list[str], list[str], list[str]]:
    """(requirements pip resolves, extra indexes, requirements installed without dependencies)."""
    resolved, indexes, no_deps = [], [], []
    for args in commands:
        reqs, i = [], 0
        while i < len(args):
            word = args[i]
            if word in ("-c", "--extra-index-url", "-e"):
                if word == "--extra-index-url":
                    indexes.append(args[i + 1])
                if word == "-e":
                    reqs += ["-e", args[i + 1]]
                i += 2
                continue
            if not word.startswith("-"):
                reqs.append(word)
            i += 1
        (no_deps if "--no-deps" in args else resolved).extend(reqs)
    return resolved, indexes, no_deps


def _local_wheels() -> list[Path]:
    """The wheels this machine's pip configuration offers from local folders (its find-links)."""
    found = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    for line in found.splitlines():
        if ".find-links=" in line:
            folders += line.split("=", 1)[1].strip("'\"").split()
    return [w for f in folders if Path(f).is_dir() for w in Path(f).glob("*.whl")]


def _stand_in(requirements: list[str], folder: Path) -> None:
    """An unreachable extra index (PyPI is the only registry some machines reach): copy from this machine's local
    wheels each exact local-label pin (torch==2.13.0+cpu) into a find-links folder that stands in for it."""
    wheels = _local_wheels()
    for text in requirements:
        if text.startswith((".", "/", "-")):
            continue
        req = Requirement(text)
        pinned = [s.version for s in req.specifier if s.operator == "=="]
        if not pinned or "+" not in pinned[0]:
            continue
        match = [
            w
            for w in wheels
            if canonicalize_name(parse_wheel_filename(w.name)[0]) == canonicalize_name(req.name)
            and str(parse_wheel_filename(w.name)[1]) == pinned[0]
        ]
        assert match, (
            f"{text} comes only from the Makefile's TORCH_INDEX, which this machine cannot reach, and no "
            "local copy of the wheel was found: `make install` cannot install it here either"
        )
        shutil.copy(match[0], folder / match[0].name)


def test_make_install_resolves_on_plain_pypi_to_pinned_packages_only(tmp_path):
    if not _reachable(PYPI):
        pytest.skip("PyPI is not reachable: the install plan cannot be resolved")
    resolved, indexes, no_deps = _parse(_install_commands())
    args = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        str(tmp_path / "plan.json"),
        "-c",
        "constraints.txt",
    ]
    for url in indexes:
        if _reachable(url.rstrip("/") + "/torch/"):
            args += ["--extra-index-url", url]
        else:
            (tmp_path / "wheels").mkdir(exist_ok=True)
            _stand_in(resolved, tmp_path / "wheels")
            args += ["--find-links", str(tmp_path / "wheels")]
    # a fresh machine: no pip configuration, no local wheel folders, no machine-wide constraint file
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")}
    env["PIP_CONFIG_FILE"] = os.devnull
    done = subprocess.run(args + resolved, cwd=ROOT, env=env, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stderr[-4000:]

    pins = _pins(ROOT / "constraints.txt")
    plan = json.loads((tmp_path / "plan.json").read_text())["install"]
    unpinned = []
    for item in plan:
        name, version = canonicalize_name(item["metadata"]["name"]), Version(item["metadata"]["version"])
        if name == "memloop":
            continue
        if pins.get(name) != Version(version.public):
            unpinned.append(f"{name}=={version} (constraints.txt: {pins.get(name)})")
    assert not unpinned, f"the install plan takes packages constraints.txt does not pin: {unpinned}"
    torch = next(Version(i["metadata"]["version"]) for i in plan if i["metadata"]["name"] == "torch")
    assert torch.local == "cpu", f"the plan installs torch {torch}, not the CPU build"
    for text in no_deps:  # installed without their dependencies: the exact pin is the whole plan
        req = Requirement(text)
        assert [str(s.version) for s in req.specifier] == [str(pins.get(canonicalize_name(req.name)))], text
