"""`memloop report` on a run it cannot write to (an archive on a read-only mount): the report is
printed, with one line saying report.md was not written and what to do; it used to exit 2, print
nothing and advise an `output` option that `report` does not have."""

from __future__ import annotations

import json

from memloop.jobs.commands.cli import app
from memloop.jobs.store.run_store import RunStore
from typer.testing import CliRunner

from tests.jobs.test_means import _unit
from tests.jobs.test_storage_faults import _tmpfs


def test_report_of_a_read_only_run_prints_it_and_says_what_was_not_written(tmp_path) -> None:
    with _tmpfs(tmp_path / "archive") as make_read_only:
        rs = RunStore.open(str(tmp_path / "archive"), "kept")
        _unit(rs, "inc", "b1", 0, scores={"rouge1": 0.6})
        _unit(rs, "inc", "b2", 0, "n/a", error="input longer than the context")
        make_read_only()
        res = CliRunner().invoke(app, ["report", rs.uri])
        assert res.exit_code == 0, res.output
        assert res.stdout.startswith("# Run `kept`") and "2 units (1 ok, 1 n/a)" in res.stdout
        note = [line for line in res.stderr.splitlines() if line.startswith("note:")]
        assert len(note) == 1 and "report.md and the plots were not written next to the run" in note[0]
        assert "Read-only file system" in note[0] and "copy the run somewhere writable" in note[0]
        assert "`output`" not in note[0]  # `report` has no such option
        res = CliRunner().invoke(app, ["report", rs.uri, "--json"])
        assert res.exit_code == 0 and json.loads(res.stdout)["figures"]
        assert not (tmp_path / "archive" / "kept" / "report.md").exists()
