"""memloop installs one import package: `pip install .` puts `memloop` (and its .dist-info) in site-packages and
nothing else; `engine`, `eval`, `jobs` and `bench` exist only as `memloop.engine`, ... (setup.py maps the
repository's folders), and no code imports the old top-level names.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.test_wheel_kernels import build_wheel
from tests.source_layout import ROOT, SUBPACKAGES


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The wheel of a copy of the sources, installed with --target into an empty folder (its dependencies are
    this environment's)."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(tmp)
    target = tmp / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def test_the_install_holds_only_memloop(site: Path) -> None:
    top = sorted(p.name for p in site.iterdir() if p.name != "bin")
    assert top == ["memloop", "memloop-0.1.0.dist-info"], top
    for name in SUBPACKAGES:
        assert (site / "memloop" / name / "__init__.py").is_file(), f"memloop.{name} is not in the install"
    # the package data every command reads: templates of the methods, judges and the viewer, kernel sources
    for data in ("eval/templates/methods", "eval/templates/judges", "jobs/results/view/templates"):
        assert any((site / "memloop" / data).iterdir()), f"{data} is empty in the install"
    entry = (site / "memloop-0.1.0.dist-info" / "entry_points.txt").read_text()
    assert "memloop = memloop.jobs.commands.cli:main" in entry


def test_the_install_runs_without_the_checkout(site: Path, tmp_path: Path) -> None:
    """From a folder outside the checkout, with the install first on the path: every subpackage and the CLI come
    from the install, the old names import nothing, and every user error is a memloop.MemloopError."""
    probe = (
        "import json, sys, importlib\n"
        "import memloop, memloop.engine, memloop.eval, memloop.jobs, memloop.bench\n"
        "from memloop.engine.errors import EngineError\n"
        "from memloop.eval.errors import EvalError\n"
        "from memloop.jobs.errors import JobsError\n"
        "old = {}\n"
        "for name in ('engine', 'eval', 'jobs', 'bench'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        old[name] = 'imported'\n"
        "    except ModuleNotFoundError:\n"
        "        old[name] = 'missing'\n"
        "print(json.dumps({'files': [m.__file__ for m in (memloop, memloop.engine, memloop.eval, memloop.jobs,\n"
        "                                                 memloop.bench)],\n"
        "                  'old': old, 'path': list(memloop.__path__),\n"
        "                  'bases': [issubclass(e, memloop.MemloopError) for e in (EngineError, EvalError, "
        "JobsError)]}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(f.startswith(str(site / "memloop")) for f in got["files"]), got["files"]
    assert got["path"] == [str(site / "memloop")]  # an install never reaches into a checkout
    assert got["old"] == {"engine": "missing", "eval": "missing", "jobs": "missing", "bench": "missing"}
    assert got["bases"] == [True, True, True]
    cli = subprocess.run(
        [sys.executable, "-m", "memloop.jobs.commands.cli", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0 and "serve" in cli.stdout, cli.stderr[-2000:]


def _old_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
            else []
        )
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in SUBPACKAGES]
    return found


def test_no_code_imports_the_old_top_level_names() -> None:
    """The checkout's root is on pytest's path, so `import engine` would still work in a test and fail in an
    install: no module, test or benchmark may use those names."""
    files = [p for d in ("memloop", *SUBPACKAGES, "tests") for p in (ROOT / d).rglob("*.py")]
    files += [p for p in ROOT.glob("*.py")]
    assert len(files) > 300
    bad = [hit for f in files for hit in _old_imports(f)]
    assert bad == [], "\n".join(bad)
