"""The style gate of `make test` (pyproject's [tool.ruff]) catches what it is configured to, where it is.

`make test` runs `ruff check .` and `ruff format --check .` over the tree; these tests check the configuration
itself: a file with each kind of break, laid out in a copy of the project's config, fails with the rule's code,
and the docstring rules hold on the public interface but not on internal modules. The pre-commit hook runs the
ruff version that CI installs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).with_name("ruff")

# unsorted imports (I001), an unused import (F401), a line of 121 characters (E501), trailing whitespace (W291),
# and a public function without a docstring (D103, where the docstring rules apply)
BROKEN = (
    '"""A module that breaks the style gate."""\n\n'
    "import sys\nimport os\n\n\n"
    "def public(x: int) -> int:\n"
    f"    return x + len(os.sep)  # {'x' * 92}\n"
    "\n\nVALUE = 1 \n"
)


def _ruff(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RUFF), *args, "--no-cache", "--config", str(root / "pyproject.toml"), "."],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _codes(res: subprocess.CompletedProcess[str], path: str) -> set[str]:
    return set(re.findall(rf"^{re.escape(path)}:\d+:\d+: ([A-Z]+\d+)", res.stdout, flags=re.M))


@pytest.fixture(scope="module")
def broken_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("style")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for rel in ("memloop/api_extra.py", "eval/methods/registry.py", "engine/core/internal.py", "tests/test_x.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(BROKEN)
    return root


def test_lint_rules_fire_with_their_codes(broken_tree: Path) -> None:
    res = _ruff(broken_tree, "check", "--output-format", "concise")
    assert res.returncode == 1, res.stdout + res.stderr
    for path in ("memloop/api_extra.py", "eval/methods/registry.py", "engine/core/internal.py", "tests/test_x.py"):
        assert {"I001", "F401", "E501", "W291"} <= _codes(res, path), (path, res.stdout)


def test_docstring_rules_hold_on_the_public_interface_only(broken_tree: Path) -> None:
    res = _ruff(broken_tree, "check", "--output-format", "concise")
    assert "D103" in _codes(res, "memloop/api_extra.py"), res.stdout
    assert "D103" in _codes(res, "eval/methods/registry.py"), res.stdout
    assert not {c for c in _codes(res, "engine/core/internal.py") if c.startswith("D")}, res.stdout
    assert not {c for c in _codes(res, "tests/test_x.py") if c.startswith("D")}, res.stdout


def test_the_formatter_check_fails_on_unformatted_code(broken_tree: Path) -> None:
    res = _ruff(broken_tree, "format", "--check")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "engine/core/internal.py" in res.stdout


def test_the_pre_commit_hook_runs_the_ruff_ci_installs() -> None:
    pinned = re.search(r"^ruff==(\S+)$", (ROOT / "constraints.txt").read_text(), flags=re.M)
    hook = re.search(r"ruff-pre-commit\n\s+rev: v(\S+)", (ROOT / ".pre-commit-config.yaml").read_text())
    assert pinned and hook, "constraints.txt pins ruff and .pre-commit-config.yaml names its revision"
    assert hook.group(1) == pinned.group(1)
    installed = subprocess.run([str(RUFF), "--version"], capture_output=True, text=True, timeout=60).stdout
    assert installed.split()[-1] == pinned.group(1)
