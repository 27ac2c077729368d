"""What a run says while it works: the engines' start (loading weights) and, with every progress line, what the
engines are doing (shapes compiled, seconds compiling, sequences running), so the first minutes at 0 units read as
work, not a hang. A real run on the bundled SmolLM2 engine and local Ray; log lines (not a terminal)."""

from __future__ import annotations

import re

import pytest
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.driver import execute
from memloop.jobs.run.plan import make_plan
from memloop.jobs.run.progress import Progress

from tests.jobs.test_driver import _config


@pytest.mark.timeout(600)
def test_a_run_logs_engine_start_and_compiling(ray_local, tmp_path) -> None:
    logs: list[str] = []
    summary = execute(make_plan(parse_config(_config(tmp_path / "runs", entities=1))), log=logs.append)
    assert summary.computed == 1, summary.errors
    assert any(re.match(r"engine: starting 1 actor\(s\): loading weights", line) for line in logs), logs
    progress = [line for line in logs if line.startswith("progress: ")]
    assert progress, logs
    # the engine compiled at least one program for this run's shapes, and the line says so
    assert re.search(
        r"engines: 1 up, [1-9]\d* shape\(s\) compiled \(\d+ s compiling\), \d+ sequence\(s\) running", progress[-1]
    ), progress[-1]


def test_a_terminal_shows_the_engines_in_the_bar(tmp_path) -> None:
    """On a terminal the same words go into the tqdm bar's postfix (no log line)."""
    import io

    logs: list[str] = []
    bar = Progress(4, "runs/x", logs.append, interactive=True)
    bar.bar.fp = io.StringIO()  # tqdm writes to this instead of the test's stderr
    bar.update(0, 0, 100, 10, 5, "engines: 1 up, 3 shape(s) compiled (40 s compiling), 2 sequence(s) running")
    assert "3 shape(s) compiled" in bar.bar.postfix and not logs
    bar.close()
