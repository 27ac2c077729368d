"""The layer rules of docs/architecture.md hold as import contracts (import-linter, pyproject.toml).

The second test proves the check has teeth: in a copy of the source tree, one forbidden import
(eval reaching into the engine) makes `lint-imports` fail and name the offending line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.source_layout import installed_copy


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the installed layout under `root` (`make lint` runs the same)."""
    exe = Path(sys.executable).with_name("lint-imports")
    env = dict(os.environ, PYTHONPATH=str(root))  # the tree under test comes first on sys.path
    return subprocess.run(
        [str(exe), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy_tree(root: Path) -> Path:
    """The packages as installed (memloop/engine, memloop/eval, ...) and the contracts, copied under `root` for a
    test to break one import in; returns the copy's `memloop` folder."""
    return installed_copy(root) / "memloop"


def test_import_contracts_hold(tmp_path: Path) -> None:
    _copy_tree(tmp_path)
    res = _lint(tmp_path)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "BROKEN" not in res.stdout and "KEPT" in res.stdout


def test_a_forbidden_import_breaks_the_contracts(tmp_path: Path) -> None:
    llm = _copy_tree(tmp_path) / "eval" / "llm.py"
    llm.write_text(llm.read_text() + "\nimport memloop.engine.errors  # a forbidden import\n")
    res = _lint(tmp_path)
    assert res.returncode != 0
    assert "memloop.eval.llm -> memloop.engine.errors" in res.stdout


def test_run_importing_results_breaks_the_jobs_floors(tmp_path: Path) -> None:
    """The run sits below results: a driver that reached up into the report would break `jobs-floors`."""
    driver = _copy_tree(tmp_path) / "jobs" / "run" / "driver.py"
    driver.write_text(driver.read_text() + "\nimport memloop.jobs.results.report  # a forbidden import\n")
    res = _lint(tmp_path)
    assert res.returncode != 0
    assert "memloop.jobs.run.driver -> memloop.jobs.results.report" in res.stdout


def test_model_importing_sched_breaks_the_engine_floors(tmp_path: Path) -> None:
    """The model sits below the scheduler: a decoder that reached up into the scheduling floor would
    break `engine-floors`."""
    decoder = _copy_tree(tmp_path) / "engine" / "model" / "decoder.py"
    decoder.write_text(decoder.read_text() + "\nimport memloop.engine.sched.scheduler  # a forbidden import\n")
    res = _lint(tmp_path)
    assert res.returncode != 0
    assert "memloop.engine.model.decoder -> memloop.engine.sched.scheduler" in res.stdout


def test_the_runner_and_attention_floors_hold(tmp_path: Path) -> None:
    """The runner sits below the core (the step runner never reaches up into the `Engine`), and the
    scheduler and attention are apart: either reaching the other breaks `engine-floors`."""
    pkg = _copy_tree(tmp_path) / "engine"
    back = {
        "runner/step_runner.py": "import memloop.engine.core.engine",
        "attention/paged.py": "import memloop.engine.sched.scheduler",
    }
    for rel, line in back.items():
        f = pkg / rel
        f.write_text(f.read_text() + f"\n{line}  # a forbidden import\n")
    res = _lint(tmp_path)
    assert res.returncode != 0
    for broken in (
        "memloop.engine.runner.step_runner -> memloop.engine.core.engine",
        "memloop.engine.attention.paged -> memloop.engine.sched.scheduler",
    ):
        assert broken in res.stdout, res.stdout[-4000:]


def test_a_closed_circle_reopened_breaks_its_contract(tmp_path: Path) -> None:
    """Five pairs of modules once imported each other (the back-import inside a function or under
    TYPE_CHECKING, to dodge the circle at import time); each now imports one way, and putting any back-import in again,
    even
    inside a function or under TYPE_CHECKING, breaks that pair's contract. So does a local store reaching
    up to the module that opens outputs (`store-split`, the order of the modules split out of the run store)."""
    pkg = _copy_tree(tmp_path)
    back = {
        "eval/methods/outcomes.py": "from memloop.eval.methods.base import Trace",
        "jobs/run/chunk_fit.py": "from memloop.jobs.run.workload import Unit",
        "jobs/run/shards.py": "from memloop.jobs.run.loops import run_loop",
        "eval/datasets/repoqa/release.py": "from memloop.eval.datasets.repoqa.loader import load_repoqa",
        "jobs/store/local.py": "from memloop.jobs.store.outputs import open_store",
        "jobs/results/mab_table.py": "from memloop.jobs.results.report import build_report",
    }
    for rel, line in back.items():
        f = pkg / rel
        f.write_text(f.read_text() + f"\n\ndef _back() -> None:\n    {line}  # a forbidden import\n")
    res = _lint(tmp_path)
    assert res.returncode != 0
    for broken in (
        "memloop.eval.methods.outcomes -> memloop.eval.methods.base",
        "memloop.jobs.run.chunk_fit -> memloop.jobs.run.workload",
        "memloop.jobs.run.shards -> memloop.jobs.run.loops",
        "memloop.eval.datasets.repoqa.release -> memloop.eval.datasets.repoqa.loader",
        "memloop.jobs.store.local -> memloop.jobs.store.outputs",
        "memloop.jobs.results.mab_table -> memloop.jobs.results.report",
    ):
        assert broken in res.stdout, res.stdout[-4000:]
