"""Parquet tables on local disk and on GCS (emulator): atomic shards, resume, identical read-back."""

from __future__ import annotations

import io
import json
import uuid

import pandas as pd
import pyarrow.parquet as pq
import pytest
from memloop.jobs.errors import StorageError
from memloop.jobs.store.outputs import open_store
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import SCHEMAS, now
from memloop.jobs.store.units import unit_key

from tests.jobs.unit_rows import samples_row, step_row, unit_columns


def _unit(sample: str, method: str, repeat: int = 0, status: str = "ok") -> dict:
    base = unit_columns("sumie:synthetic", sample, method, repeat)
    sample_row = samples_row(
        base,
        status,
        None if status == "ok" else "boom",
        output_json=json.dumps({"attributes": {"name": [sample]}}),
        n_steps=2,
        prompt_tokens=100,
        cached_tokens=40,
        decoded_tokens=20,
        actor="a0",
    )
    steps = [
        step_row(base, i, prompt="p" * 300_000 if i else "p", prompt_tokens=50, cached_tokens=20, decoded_tokens=10)
        for i in range(2)
    ]
    judgments = [dict(base, judge="sumie-match", index=0, record_json=json.dumps({"pred": "x", "match": True}))]
    scores = [dict(base, judge="sumie-match", metric="f1", turn=t_, value=0.5 + t_ / 10) for t_ in range(3)]
    return {"samples": [sample_row], "steps": steps, "judgments": judgments, "scores": scores}


def _merge(*units: dict) -> dict:
    out: dict = {}
    for u in units:
        for k, v in u.items():
            out.setdefault(k, []).extend(v)
    return out


def _write_run(rs: RunStore) -> None:
    rs.write_shard(_merge(_unit("e1", "go-json"), _unit("e2", "go-json")))
    rs.write_shard(_merge(_unit("e1", "cok", status="failed")))
    rs.write_shard(_merge(_unit("e1", "cok")))  # a later retry succeeded: it wins


@pytest.fixture(params=["local", "gcs"])
def run_store(request, tmp_path) -> RunStore:
    if request.param == "local":
        return RunStore.open(str(tmp_path / "runs"), "t-run")
    base = request.getfixturevalue("gcs_emulator")
    return RunStore.open(f"{base}/{uuid.uuid4().hex[:8]}/runs", "t-run")


def test_tables_round_trip_and_latest_outcome_wins(run_store: RunStore) -> None:
    _write_run(run_store)
    samples = run_store.table("samples").to_pandas()
    assert sorted(samples["unit"]) == sorted(
        [unit_key("sumie:synthetic", s, m, 0) for s, m in [("e1", "go-json"), ("e2", "go-json"), ("e1", "cok")]]
    )
    assert set(samples["status"]) == {"ok"}
    assert run_store.done_units() == set(samples["unit"])
    steps = run_store.table("steps")
    assert steps.num_rows == 6  # the failed attempt's steps are not read back
    assert steps.schema.equals(SCHEMAS["steps"])
    assert len(steps.column("prompt")[1].as_py()) == 300_000  # large objects survive (range reads on GCS)
    assert run_store.table("scores").num_rows == 9


def test_local_and_gcs_read_back_identically(tmp_path, gcs_emulator) -> None:
    local = RunStore.open(str(tmp_path / "runs"), "same")
    remote = RunStore.open(f"{gcs_emulator}/{uuid.uuid4().hex[:8]}", "same")
    fixed = _merge(_unit("e1", "go-json"), _unit("e2", "cok"))
    for rs in (local, remote):
        rs.write_shard(fixed)
    for table in ("samples", "steps", "judgments", "scores"):
        a, b = local.table(table), remote.table(table)
        assert a.drop(["shard"]).equals(b.drop(["shard"])), table
        pd.testing.assert_frame_equal(a.to_pandas().drop(columns="shard"), b.to_pandas().drop(columns="shard"))
    # and the raw objects are plain Parquet files any reader can open
    name = remote.store.list(remote.name("samples"))[0]
    assert pq.read_table(io.BytesIO(remote.store.get(name))).num_rows == 2


def test_uncommitted_shard_is_invisible(tmp_path) -> None:
    rs = RunStore.open(str(tmp_path), "r")
    rs.write_shard(_unit("e1", "go-json"))
    # a writer that died after its steps file but before its samples file
    from memloop.jobs.store.run_files import to_parquet

    orphan = [dict(r, run_id="r", shard="orphan") for r in _unit("e9", "go-json")["steps"]]
    rs.store.put(rs.name("steps", "orphan.parquet"), to_parquet("steps", orphan))
    (tmp_path / "r" / "samples" / ".half.parquet.tmp").write_bytes(b"PAR1 half")  # a temporary file
    assert rs.table("steps").num_rows == 2
    assert rs.done_units() == {unit_key("sumie:synthetic", "e1", "go-json", 0)}


def test_unwritable_output_fails_with_named_field(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rs = RunStore.open(str(blocker / "runs"), "r")
    with pytest.raises(StorageError, match="`output`"):
        rs.check_writable()


def test_unsupported_scheme_and_missing_run(tmp_path) -> None:
    with pytest.raises(StorageError, match="only local paths and gs://"):
        open_store("s3://bucket/x")
    with pytest.raises(StorageError, match="holds no run"):
        RunStore.at(str(tmp_path / "nothing"))


def test_runs_written_before_a_column_was_added_stay_readable(tmp_path) -> None:
    """A `runs` row from before `ray_job_id` existed reads back with that column null."""
    import pyarrow as pa

    rs = RunStore.open(str(tmp_path), "old")
    old_schema = pa.schema([f for f in SCHEMAS["runs"] if f.name != "ray_job_id"])
    t = now()
    row = {f.name: None for f in old_schema} | {"run_id": "old", "invocation": "i1", "started_at": t, "finished_at": t}
    buf = pa.BufferOutputStream()
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([row], schema=old_schema), buf)
    rs.store.put(rs.name("runs", "i1.parquet"), buf.getvalue().to_pybytes())
    runs = rs.table("runs").to_pandas()
    assert list(runs.columns) == SCHEMAS["runs"].names and runs["ray_job_id"].isna().all()


class _CountingStore:
    """A local store that counts the objects read under each table (what a resume opens)."""

    def __init__(self, inner) -> None:
        self.inner, self.reads = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def get(self, name: str) -> bytes:
        self.reads.append(name)
        return self.inner.get(name)


def _without_shard(t):
    return t.drop_columns(["shard"]).to_pandas().sort_values(list(t.drop_columns(["shard"]).column_names[:8]))


def test_compaction_merges_small_shards_into_identical_tables(tmp_path) -> None:
    rs = RunStore.open(str(tmp_path), "r1")
    for i in range(10):
        rs.write_shard(
            _merge(_unit(f"s{i}", "gu-json"), _unit(f"s{i}", "inc-update", status="failed" if i == 3 else "ok"))
        )
    before = {t: rs.table(t) for t in ("samples", "steps", "judgments", "scores")}
    # each shard's largest table has 6 rows (3 scores per unit x 2): a target of 20 rows merges 3 at a time
    counts = rs.compact(20)
    assert counts == {"before": 10, "after": 4}
    assert len(rs.store.list("r1/samples")) == 4 and len(rs.store.list("r1/steps")) == 4
    for t, old in before.items():
        new = rs.table(t)
        assert new.num_rows == old.num_rows, t
        pd.testing.assert_frame_equal(
            _without_shard(new).reset_index(drop=True), _without_shard(old).reset_index(drop=True), check_like=True
        )
    # a shard already at the target stays as it is
    assert RunStore.open(str(tmp_path), "r2").compact(20) == {"before": 0, "after": 0}


def test_a_later_invocation_compacts_the_small_shards_an_earlier_one_left(tmp_path) -> None:
    """A compaction that failed (a full disk) left its invocation's small shards: the next invocation's
    `done_units` finds them whole (`prior`) and its compaction merges them, with the tables unchanged."""
    rs = RunStore.open(str(tmp_path), "r1")
    for i in range(6):
        rs.write_shard(_unit(f"s{i}", "gu-json", status="failed" if i == 2 else "ok"))
    rs.write_index("inv-1")  # no compaction: it failed
    before = {t: rs.table(t) for t in ("samples", "steps", "judgments", "scores")}
    later = RunStore.open(str(tmp_path), "r1")
    done = later.done_units()
    assert len(later.prior) == 5 and later.compactable(1_000)  # the shard of the failed unit holds no done unit
    assert later.compact(1_000) == {"before": 5, "after": 1}
    later.write_index("inv-2")
    assert len(rs.store.list("r1/samples")) == 2  # the merged shard and the failed unit's own
    for t, old in before.items():
        pd.testing.assert_frame_equal(
            _without_shard(later.table(t)).reset_index(drop=True),
            _without_shard(old).reset_index(drop=True),
            check_like=True,
        )
    again = RunStore.open(str(tmp_path), "r1")
    assert again.done_units() == done and not again.compactable(1_000)


def test_files_of_shards_never_committed_are_removed_and_nothing_else(tmp_path) -> None:
    """kill -9 between a shard's parts and its commit leaves files no reader sees; the next invocation
    (holding the lock) removes them, and every committed shard stays."""
    rs = RunStore.open(str(tmp_path), "r1")
    rs.write_shard(_unit("s1", "gu-json"))
    shard = "20261205T000000000000-deadbeef"
    rs.write_part(shard, "steps", _unit("s2", "gu-json")["steps"])  # parts written, the commit never came
    rs.write_part(shard, "scores", _unit("s2", "gu-json")["scores"], part="judge-0")
    before = rs.table("samples")
    gone = RunStore.open(str(tmp_path), "r1").remove_orphans()
    assert sorted(gone) == [f"r1/scores/{shard}+judge-0.parquet", f"r1/steps/{shard}.parquet"]
    assert not any(shard in n for n in rs.store.list("r1"))
    assert rs.table("samples").equals(before) and len(rs.store.list("r1/steps")) == 1


def test_resume_reads_the_unit_indexes_and_only_unindexed_shards(tmp_path, monkeypatch) -> None:
    import memloop.jobs.store.run_store as run_store

    rs = RunStore.open(str(tmp_path), "r1")
    for i in range(6):
        rs.write_shard(_unit(f"s{i}", "gu-json", status="failed" if i == 0 else "ok"))
    rs.compact(1_000)
    rs.write_index("inv-1")
    killed = RunStore.open(str(tmp_path), "r1")  # an invocation killed before it wrote its index
    killed.write_shard(_unit("s9", "gu-json"))
    store = _CountingStore(rs.store)
    reader = RunStore(store, "r1")
    decoded: list[str] = []  # the run files decoded for their rows (the check of a file's pages is apart)
    real = run_store.from_parquet
    monkeypatch.setattr(
        run_store,
        "from_parquet",
        lambda data, uri="", columns=None: decoded.append(uri.rpartition("/r1/")[2]) or real(data, uri, columns),
    )
    done = reader.done_units()
    assert done == {unit_key("sumie:synthetic", f"s{i}", "gu-json", 0) for i in (1, 2, 3, 4, 5, 9)}
    unindexed = f"samples/{next(iter(killed.committed))}.parquet"
    assert [n for n in decoded if n.startswith("samples/")] == [unindexed]  # units only of the unindexed shard
    # every file a resume counts on is read once to check its pages (the unindexed one once more for its units)
    samples_read = sorted(n for n in store.reads if n.startswith("r1/samples/"))
    assert sorted(set(samples_read)) == sorted(n for n in rs.store.list("r1/samples") if n.endswith(".parquet"))
    assert len(samples_read) == len(set(samples_read)) + 1
    assert done == {
        u for u, s in zip(*(reader.samples().column(c).to_pylist() for c in ("unit", "status"))) if s == "ok"
    }


def test_a_unit_that_does_not_apply_is_done_and_not_computed_again_on_resume(tmp_path) -> None:
    """n/a (the method does not apply to the sample) is a final outcome like ok: resume skips it, with
    and without the unit indexes, and it is the unit's outcome over an earlier failed attempt."""
    rs = RunStore.open(str(tmp_path), "r")
    rs.write_shard(_unit("e1", "long-context", status="failed"))
    rs.write_shard(_unit("e1", "long-context", status="n/a"))
    rs.write_shard(_unit("e2", "long-context", status="failed"))
    key = unit_key("sumie:synthetic", "e1", "long-context", 0)
    assert rs.done_units() == {key}
    rs.write_index("inv-1")
    assert RunStore.at(rs.uri).done_units() == {key}
    outcome = {r["unit"]: r["status"] for r in rs.table("samples").to_pylist()}
    assert outcome[key] == "n/a"


def test_a_write_that_fails_on_a_full_disk_leaves_no_temporary_file(tmp_path) -> None:
    """The write limit (RLIMIT_FSIZE, as a full disk: the write fails mid-file) makes every put fail; the
    hidden temporary files those writes started are removed, for create, overwrite and replace."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = tmp_path / "runs"
    code = f"""
import resource, signal
from memloop.jobs.errors import StorageError
from memloop.jobs.store.local import LocalStore
s = LocalStore({str(root)!r})
gen = s.put("r/.lock", b"small", mode="create")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
big = b"x" * (1 << 20)
for call in (lambda: s.put("r/samples/a.parquet", big, mode="create"),
             lambda: s.put("r/report.md", big, mode="overwrite"), lambda: s.replace("r/.lock", big, gen)):
    try:
        call()
    except (StorageError, OSError) as exc:
        print("refused:", type(exc).__name__, exc)
"""
    root_dir = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root_dir,
        env=dict(os.environ, PYTHONPATH=str(root_dir)),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("refused:") == 3 and "File too large" in res.stdout, res.stdout
    left = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert [p for p in left if p.endswith(".tmp")] == [], left
    assert (root / "r/.lock").read_bytes() == b"small"  # nothing half-written in place


@pytest.mark.parametrize("table", ["samples", "steps", "scores"])
def test_a_resume_checks_the_footers_of_the_shards_it_counts_on(run_store: RunStore, table: str) -> None:
    """A cut-short file of a shard the index covers: the resume names it (and only it) instead of saying
    "already done"; a deleted one (what that error advises) makes the shard's units computed again."""
    from memloop.jobs.store.run_files import DamagedRunError

    _write_run(run_store)
    run_store.write_index("inv-1")
    done = run_store.done_units()
    shard = sorted(run_store.committed)[0]  # e1 and e2 of go-json
    name = run_store.name(f"{table}/{shard}.parquet")
    data = run_store.store.get(name)
    run_store.store.put(name, data[: len(data) // 2], mode="overwrite")
    with pytest.raises(DamagedRunError, match="1 file.s. of .* are damaged: .*" + shard + ".* delete them"):
        RunStore(run_store.store, "t-run").done_units()
    run_store.store.delete(name)
    fresh = RunStore(run_store.store, "t-run")
    expect = done - {unit_key("sumie:synthetic", e, "go-json", 0) for e in ("e1", "e2")}
    assert fresh.done_units() == expect
    if table != "samples":  # a shard without its samples file was never committed; one without steps is incomplete
        assert fresh.incomplete == {shard: [f"{table}/{shard}.parquet"]}
