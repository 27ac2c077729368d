"""`memloop export`: one row per unit in a hive layout that pyarrow.dataset (like DuckDB) reads back."""

from __future__ import annotations

import json
import uuid

import pyarrow.dataset as ds
import pytest
from memloop.jobs.commands.cli import app
from memloop.jobs.store.export import export_run
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import SCHEMAS
from memloop.jobs.store.units import unit_key
from typer.testing import CliRunner

from tests.jobs.cli_entry import memloop_cli
from tests.jobs.unit_rows import manifest_row, samples_row, step_row, unit_columns


def _unit(sample: str, status: str, f1: float) -> dict:
    base = unit_columns("sumie:synthetic", sample, "go-json", 0)
    error = None if status == "ok" else "TimeoutError: judge"
    return {
        "samples": [
            samples_row(base, status, error, output_json="{}", prompt_tokens=10, cached_tokens=4, decoded_tokens=2)
        ],
        "steps": [step_row(base, 0, prompt_tokens=10, cached_tokens=4, decoded_tokens=2)],
        "judgments": [dict(base, judge="sumie-exact", index=0, record_json=json.dumps({"f1": f1}))],
        "scores": [dict(base, judge="sumie-exact", metric="f1", turn=None, value=f1)],
    }


def _manifest(rs: RunStore, invocation: str) -> None:
    rs.write_manifest(manifest_row(rs.store.uri, invocation, samples=2, computed=1, failed=1))


def _run(output: str, run_id: str) -> RunStore:
    rs = RunStore.open(output, run_id)
    rs.write_shard(_unit("e1", "failed", 0.0))  # first attempt failed (its scores row says 0.0) ...
    rs.write_shard(_unit("e2", "ok", 0.9))
    _manifest(rs, "inv-1")
    rs.write_shard(_unit("e1", "ok", 0.5))  # ... the retry succeeded
    rs.write_shard(_unit("e1", "failed", 0.0))  # a later failed attempt never beats an ok one
    _manifest(rs, "inv-2")
    return rs


def _read(dest: str, table: str) -> list[dict]:
    return ds.dataset(f"{dest}/{table}", format="parquet", partitioning="hive").to_table().to_pylist()


def test_retried_unit_exports_exactly_one_row(tmp_path) -> None:
    rs = _run(str(tmp_path / "runs"), "r1")
    res = export_run(rs.uri)
    assert res.dest == str(tmp_path / "runs" / "export")
    assert (tmp_path / "runs" / "export" / "samples" / "run_id=r1" / "part-0.parquet").is_file()
    samples = _read(res.dest, "samples")
    assert sorted((r["sample_id"], r["status"], r["run_id"]) for r in samples) == [
        ("e1", "ok", "r1"),
        ("e2", "ok", "r1"),
    ]
    scores = _read(res.dest, "scores")
    assert sorted((r["sample_id"], r["value"]) for r in scores) == [("e1", 0.5), ("e2", 0.9)]  # no 0.0 of the failures
    assert len(_read(res.dest, "steps")) == 2 and len(_read(res.dest, "judgments")) == 2
    assert len(_read(res.dest, "runs")) == 2  # one row per invocation
    assert res.rows == {"samples": 2, "steps": 2, "judgments": 2, "scores": 2, "runs": 2}
    # the raw shards hold four samples rows for the same two units: what the export resolves
    assert sum(1 for _ in rs.store.list(rs.name("samples"))) == 4


def test_two_runs_share_one_dataset_and_reexport_replaces(tmp_path) -> None:
    out = str(tmp_path / "runs")
    a, b = _run(out, "ra"), _run(out, "rb")
    dest = str(tmp_path / "lake")
    export_run(a.uri, dest)
    export_run(b.uri, dest)
    export_run(b.uri, dest)  # again: the partition is replaced, never duplicated
    t = ds.dataset(f"{dest}/samples", format="parquet", partitioning="hive").to_table()
    assert sorted(zip(t.column("run_id").to_pylist(), t.column("sample_id").to_pylist())) == [
        ("ra", "e1"),
        ("ra", "e2"),
        ("rb", "e1"),
        ("rb", "e2"),
    ]
    assert set(t.schema.names) == set(SCHEMAS["samples"].names)


def test_export_to_gcs_and_cli(tmp_path, gcs_emulator) -> None:
    rs = _run(str(tmp_path / "runs"), "r1")
    dest = f"{gcs_emulator}/{uuid.uuid4().hex[:8]}/lake"
    export_run(rs.uri, dest)
    export_run(rs.uri, dest)  # overwrite is allowed on the precondition-enforcing fake
    from memloop.jobs.store.outputs import open_store

    lake = open_store(dest)
    assert sorted(lake.children("")) == ["judgments", "runs", "samples", "scores", "steps"]
    assert lake.list("samples") == ["samples/run_id=r1/part-0.parquet"]
    result = CliRunner().invoke(app, ["export", rs.uri, "--to", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["rows"]["samples"] == 2


def test_a_run_missing_its_samples_table_is_an_error_and_keeps_the_export(tmp_path, capsys, monkeypatch) -> None:
    import shutil

    rs = _run(str(tmp_path / "runs"), "r1")
    export_run(rs.uri)
    shutil.rmtree(tmp_path / "runs" / "r1" / "samples")  # a partial copy, a listing glitch
    code, _, err = memloop_cli(["export", rs.uri], capsys, monkeypatch)
    assert code == 2 and "no samples/ table although its runs/ manifests record 4 finished unit(s)" in err, err
    assert err.count("\n") == 1
    assert len(_read(str(tmp_path / "runs" / "export"), "samples")) == 2  # the good export is untouched
    code, _, err = memloop_cli(["report", rs.uri], capsys, monkeypatch)
    assert code == 2 and "no samples/ table" in err


def test_export_never_shrinks_a_partition_without_force(tmp_path, capsys, monkeypatch) -> None:
    rs = _run(str(tmp_path / "runs"), "r1")
    dest = str(tmp_path / "lake")
    export_run(rs.uri, dest)
    # the shard of sample e2 (by its rows' sample_id: "e2" can also occur in another shard's random name)
    e2 = [
        p
        for p in (tmp_path / "runs" / "r1" / "samples").iterdir()
        if RunStore.at(rs.uri)._read_one(f"r1/samples/{p.name}").column("sample_id").to_pylist() == ["e2"]
    ]
    e2[0].unlink()  # a deleted shard: its unit is not done (a resume computes it again), the export shrinks
    code, _, err = memloop_cli(["export", rs.uri, "--to", dest], capsys, monkeypatch)
    assert code == 2 and "ExportShrinkError" in err and "holds 2 rows" in err and "--force" in err, err
    assert len(_read(dest, "steps")) == 2 and len(_read(dest, "samples")) == 2  # nothing was replaced
    code, out, _ = memloop_cli(["export", rs.uri, "--to", dest, "--force"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["rows"]["samples"] == 1
    assert len(_read(dest, "samples")) == 1


def test_a_run_whose_tables_disagree_is_refused_naming_the_units(tmp_path, capsys, monkeypatch) -> None:
    """A deleted `steps` file: the samples rows say ok, the steps are gone. report and export refuse the
    run (also with --force) naming the units, and a resume computes those units again."""
    import shutil

    rs = _run(str(tmp_path / "runs"), "r1")
    dest = str(tmp_path / "lake")
    export_run(rs.uri, dest)
    shutil.rmtree(tmp_path / "runs" / "r1" / "steps")
    for args in (["export", rs.uri, "--to", dest], ["export", rs.uri, "--to", dest, "--force"], ["report", rs.uri]):
        code, _, err = memloop_cli(args, capsys, monkeypatch)
        assert code == 2 and "error: DamagedRunError:" in err and "the `steps` rows of 2 unit(s) are missing" in err, (
            err
        )
        assert unit_key("sumie:synthetic", "e1", "go-json", 0) in err and "memloop run" in err, err
        assert err.count("\n") == 1
    assert len(_read(dest, "steps")) == 2  # nothing was replaced
    fresh = RunStore.at(rs.uri)
    assert fresh.done_units() == set() and len(fresh.incomplete) == 2  # both ok shards are computed again


def test_export_takes_the_run_id_from_the_tables(tmp_path) -> None:
    _run(str(tmp_path / "runs"), "r1")
    (tmp_path / "runs" / "r1").rename(tmp_path / "runs" / "copy-of-r1")
    res = export_run(str(tmp_path / "runs" / "copy-of-r1"))
    assert res.run_id == "r1"
    assert (tmp_path / "runs" / "export" / "samples" / "run_id=r1" / "part-0.parquet").is_file()
    assert not (tmp_path / "runs" / "export" / "samples" / "run_id=copy-of-r1").exists()


@pytest.mark.parametrize("damage", ["truncate", "garbage-runs"])
def test_an_unreadable_table_file_is_named(tmp_path, capsys, monkeypatch, damage) -> None:
    rs = _run(str(tmp_path / "runs"), "r1")
    other = _run(str(tmp_path / "runs"), "r2")
    if damage == "truncate":
        bad = sorted((tmp_path / "runs" / "r1" / "samples").iterdir())[0]
        bad.write_bytes(bad.read_bytes()[:100])
    else:
        bad = tmp_path / "runs" / "r1" / "runs" / "junk.parquet"
        bad.write_bytes(b"not parquet at all")
    for args in (["report", rs.uri], ["export", rs.uri], ["compare", rs.uri, other.uri]):
        code, _, err = memloop_cli(args, capsys, monkeypatch)
        assert code == 2, (args, err)
        assert f"error: DamagedRunError: {bad} is not a readable Parquet file" in err, (args, err)
        assert "Traceback" not in err


@pytest.mark.parametrize("where", ["the-run", "inside-the-run", "a-table-of-the-run", "the-output"])
def test_a_destination_inside_a_run_or_holding_one_is_refused_and_the_run_stays_whole(
    tmp_path, capsys, monkeypatch, where
) -> None:
    """`export RUN --to RUN` once wrote samples/run_id=.../part-0.parquet inside the run's own tables (which
    the store lists recursively), exit 0; afterwards report, export and memloop.load failed."""
    rs = _run(str(tmp_path / "runs"), "r1")
    run_dir = tmp_path / "runs" / "r1"
    dest = {
        "the-run": run_dir,
        "inside-the-run": run_dir / "lake",
        "a-table-of-the-run": run_dir / "samples",
        "the-output": tmp_path / "runs",
    }[where]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, _, err = memloop_cli(["export", rs.uri, "--to", str(dest)], capsys, monkeypatch)
    assert code == 2 and "error: ExportDestinationError:" in err and err.count("\n") == 1, err
    assert ("is inside the run" in err) if where != "the-output" else ("holds the run(s) r1" in err), err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
    code, out, err = memloop_cli(["report", rs.uri, "--json"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["units"][0]["ok"] == 2, err


def test_an_existing_file_as_destination_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    rs = _run(str(tmp_path / "runs"), "r1")
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    for fmt in ("parquet", "inspect"):
        code, _, err = memloop_cli(["export", rs.uri, "--to", str(target), "--format", fmt], capsys, monkeypatch)
        assert code == 2 and "is a file, not a directory" in err and err.count("\n") == 1, (fmt, err)
    assert target.read_text() == "mine\n"


def test_a_run_being_computed_is_exported_only_with_allow_partial_and_reported_as_partial(
    tmp_path, capsys, monkeypatch
) -> None:
    """While a live process holds the run's lock (here this test, through the run store's own lock), the
    tables are partial: export refuses without --allow-partial, and the report says so in its first lines and
    in --json (`in_progress`, `incomplete`, every figure `partial`). Once released, all reads are whole again."""
    rs = _run(str(tmp_path / "runs"), "r1")
    dest = str(tmp_path / "lake")
    lock = RunStore.at(rs.uri).acquire_lock("memloop run (a test)")
    try:
        code, _, err = memloop_cli(["export", rs.uri, "--to", dest], capsys, monkeypatch)
        assert code == 2 and "error: RunInProgressError:" in err and "--allow-partial" in err, err
        assert "memloop run (a test)" in err and not (tmp_path / "lake").exists()
        code, out, err = memloop_cli(["export", rs.uri, "--to", dest, "--allow-partial"], capsys, monkeypatch)
        assert code == 0 and json.loads(out)["partial"] is True, err
        code, out, _ = memloop_cli(["report", rs.uri, "--json"], capsys, monkeypatch)
        rep = json.loads(out)
        assert code == 0 and rep["incomplete"] is True and rep["in_progress"]["owner"] == "memloop run (a test)"
        assert rep["figures"] and all(f["partial"] for f in rep["figures"])
        code, out, _ = memloop_cli(["report", rs.uri], capsys, monkeypatch)
        assert code == 0 and "**In progress, partial figures:**" in out.split("## Units")[0]
    finally:
        lock.release()
    code, out, _ = memloop_cli(["export", rs.uri, "--to", dest], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["partial"] is False
    code, out, _ = memloop_cli(["report", rs.uri, "--json"], capsys, monkeypatch)
    rep = json.loads(out)
    assert rep["in_progress"] is None and rep["incomplete"] is False and not any("partial" in f for f in rep["figures"])


def test_a_lock_left_by_a_dead_driver_is_not_a_run_in_progress(tmp_path, capsys, monkeypatch) -> None:
    """kill -9 of the driver leaves its lock: a holder gone from this host computes nothing."""
    import subprocess
    import sys

    rs = _run(str(tmp_path / "runs"), "r1")
    code = (
        "import sys; from memloop.jobs.store.run_store import RunStore; "
        "RunStore.at(sys.argv[1]).acquire_lock('gone'); import os; os._exit(0)"
    )  # exits holding it
    subprocess.run([sys.executable, "-c", code, rs.uri], check=True, timeout=120)
    assert (tmp_path / "runs" / "r1" / ".lock").is_file()
    assert RunStore.at(rs.uri).computing() is None
    code, out, err = memloop_cli(["export", rs.uri, "--to", str(tmp_path / "lake")], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["partial"] is False, err


def test_an_unwritable_destination_names_to_not_output(tmp_path, capsys, monkeypatch) -> None:
    """The store's advice is for a run's `output`; export's error names `--to`, the option it takes."""
    rs = _run(str(tmp_path / "runs"), "r1")
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    for fmt in ("parquet", "inspect"):
        code, _, err = memloop_cli(
            ["export", rs.uri, "--to", str(blocker / "lake"), "--format", fmt], capsys, monkeypatch
        )
        assert code == 2 and "--to " in err and "give --to a directory" in err and "`output`" not in err, (fmt, err)
        assert err.count("\n") == 1
