"""Generation preconditions on the GCS fake, as GCS enforces them: reports rewrite, shards never
overwrite, the run lock is create-only and released only by its holder. The same store checks run on
a local directory."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from google.api_core.exceptions import PreconditionFailed
from memloop.jobs.errors import LockHeldError
from memloop.jobs.results.report import write_report
from memloop.jobs.store.gcs import GCSStore
from memloop.jobs.store.objects import ConflictError
from memloop.jobs.store.outputs import open_store
from memloop.jobs.store.run_store import RunStore

from tests.jobs.unit_rows import samples_row, unit_columns


def _shard(sample: str) -> dict:
    base = unit_columns("sumie:synthetic", sample, "go-json", 0)
    return {
        "samples": [samples_row(base, output_json="{}", prompt_tokens=10, cached_tokens=4, decoded_tokens=2)],
        "scores": [dict(base, judge="sumie-exact", metric="f1", turn=i, value=0.5) for i in range(2)],
    }


@pytest.fixture
def gcs_base(gcs_emulator) -> str:
    return f"{gcs_emulator}/{uuid.uuid4().hex[:8]}"


def test_the_fake_rejects_what_gcs_rejects(gcs_server, gcs_base) -> None:
    """The google-cloud-storage client itself sees 412 from the fake for a create-only overwrite."""
    store = GCSStore(gcs_base)
    blob = store.bucket.blob(store._blob_name("x"))
    blob.upload_from_string(b"1", if_generation_match=0)
    before = len(gcs_server.rejected)
    with pytest.raises(PreconditionFailed):
        store.bucket.blob(store._blob_name("x")).upload_from_string(b"2", if_generation_match=0)
    with pytest.raises(PreconditionFailed):
        store.bucket.blob(store._blob_name("x")).delete(if_generation_match=blob.generation + 1)
    assert len(gcs_server.rejected) == before + 2
    assert store.get("x") == b"1"


def test_second_report_on_gcs_succeeds(gcs_base) -> None:
    rs = RunStore.open(f"{gcs_base}/runs", "rep")
    rs.write_shard(_shard("e1"))
    uri, first = write_report(rs.uri)
    rs.write_shard(_shard("e2"))
    _, second = write_report(rs.uri)  # report.md and the PNGs are rewritten, not refused
    assert "2 units" in second.markdown and "1 units" in first.markdown
    assert rs.store.get(rs.name("report.md")).decode() == second.markdown


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_create_only_write_of_an_existing_shard_is_a_named_conflict(where, tmp_path, gcs_base) -> None:
    store = open_store(str(tmp_path) if where == "local" else gcs_base)
    store.put("r/samples/s1.parquet", b"first", mode="create")
    with pytest.raises(ConflictError, match="already exists and is written create-only"):
        store.put("r/samples/s1.parquet", b"second", mode="create")
    assert store.get("r/samples/s1.parquet") == b"first"
    store.put("r/report.md", b"one", mode="overwrite")
    store.put("r/report.md", b"two", mode="overwrite")
    assert store.get("r/report.md") == b"two"


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_generation_matched_replace(where, tmp_path, gcs_base) -> None:
    store = open_store(str(tmp_path) if where == "local" else gcs_base)
    gen = store.put("obj", b"v1", mode="create")
    data, seen = store.read("obj")
    assert (data, seen) == (b"v1", gen)
    gen2 = store.replace("obj", b"v2", seen)
    assert gen2 != gen
    with pytest.raises(ConflictError, match="changed by another process"):
        store.replace("obj", b"stale writer", seen)  # read v1, but v2 is there now
    with pytest.raises(ConflictError):
        store.delete("obj", seen)
    assert store.get("obj") == b"v2"
    store.delete("obj", gen2)
    assert store.list("") == []


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_run_lock_names_its_holder_and_is_released(where, tmp_path, gcs_base) -> None:
    out = str(tmp_path / "runs") if where == "local" else f"{gcs_base}/runs"
    rs = RunStore.open(out, "locked")
    first = rs.acquire_lock("memloop run nightly.yaml (job 1)")
    with pytest.raises(LockHeldError, match=r"memloop run nightly\.yaml \(job 1\)") as err:
        RunStore.open(out, "locked").acquire_lock("job 2")
    assert err.value.holder["owner"] == "memloop run nightly.yaml (job 1)"
    assert "delete" in str(err.value) and ".lock" in str(err.value)
    first.refresh()  # a heartbeat keeps it
    with pytest.raises(LockHeldError):
        rs.acquire_lock("job 2", stale_after_s=3600)  # fresh heartbeat: not stale
    assert first.release()
    with rs.acquire_lock("job 2") as second:
        assert json.loads(rs.store.get(rs.name(".lock")))["owner"] == "job 2"
    assert second.released
    rs.acquire_lock("job 3").release()  # free again


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_stale_lock_is_taken_over_once_and_the_old_holder_notices(where, tmp_path, gcs_base) -> None:
    out = str(tmp_path / "runs") if where == "local" else f"{gcs_base}/runs"
    rs = RunStore.open(out, "stale")
    old = rs.acquire_lock("crashed job")
    time.sleep(0.05)  # let the heartbeat age past the limit below (ordering, not timing, is asserted)
    new = rs.acquire_lock("next job", stale_after_s=0.01)
    assert json.loads(rs.store.get(rs.name(".lock")))["owner"] == "next job"
    with pytest.raises(LockHeldError, match="taken over"):
        old.refresh()
    assert old.release() is False  # never deletes the new holder's lock
    assert json.loads(rs.store.get(rs.name(".lock")))["owner"] == "next job"
    new.release()


def test_shard_listing_hides_the_lock(tmp_path) -> None:
    rs = RunStore.open(str(tmp_path), "r")
    with rs.acquire_lock("me"):
        rs.write_shard(_shard("e1"))
        assert all(".lock" not in n for n in rs.store.list("r"))
        assert rs.store.children("") == ["r"]
