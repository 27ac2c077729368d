"""A run all of whose units failed before any row was written (every engine killed for memory): `memloop report`
names the recorded cause instead of calling the run folder a partial copy."""

from __future__ import annotations

import json

from memloop.jobs.store.run_store import RunStore

from tests.jobs.cli_entry import memloop_cli
from tests.jobs.unit_rows import manifest_row

OOM = (
    "RayActorError: The actor died unexpectedly: OutOfMemoryError: Task was killed due to the node running low "
    "on memory (Memory on the node was 22.1GB / 23.0GB)"
)


def _manifest(rs: RunStore, computed: int, failed: int, errors: list[str]) -> None:
    stats = json.dumps({"first_errors": errors})
    rs.write_manifest(
        manifest_row(rs.store.uri, "inv-1", samples=4, computed=computed, failed=failed, stats_json=stats)
    )


def test_report_names_the_out_of_memory_kill_of_every_unit(tmp_path, capsys, monkeypatch) -> None:
    rs = RunStore.open(str(tmp_path / "runs"), "r1")
    _manifest(rs, computed=0, failed=4, errors=[OOM])
    code, _, err = memloop_cli(["report", rs.uri], capsys, monkeypatch)
    assert code == 2, err
    assert "every one of its 4 finished unit(s) failed" in err and "OutOfMemoryError" in err, err
    assert "partial copy" not in err


def test_a_run_with_computed_units_but_no_samples_is_still_a_partial_copy(tmp_path, capsys, monkeypatch) -> None:
    rs = RunStore.open(str(tmp_path / "runs"), "r1")
    _manifest(rs, computed=3, failed=1, errors=[OOM])
    code, _, err = memloop_cli(["report", rs.uri], capsys, monkeypatch)
    assert code == 2 and "partial copy" in err, err
