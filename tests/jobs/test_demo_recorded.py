"""The demo config (`make demo`'s) on the bundled SmolLM2 computes exactly what was recorded
(tests/jobs/data/demo-smollm2.json, written by tests/jobs/record_demo.py from a run before jobs/
was split into floors): the same outputs, token counts and scores, unit by unit. A refactor of
jobs/ must keep this; a change to what units compute re-records it on purpose."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs.record_demo import RECORD, digest_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_outputs_and_scores_match_the_recorded_run(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-c", "from jobs.commands.cli import main; main()", "run",
                          "jobs/configs/demo.yaml", "--model", "smollm2-135m", "--output", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    recorded = json.loads(RECORD.read_text())
    got = digest_of(summary["output"])
    # The run id is not compared: it digests engine/ and eval/ source, comments included.
    assert got["outputs"] == recorded["outputs"], "outputs changed; if on purpose, re-record (tests/jobs/record_demo.py)"
    assert got["scores"] == recorded["scores"]
