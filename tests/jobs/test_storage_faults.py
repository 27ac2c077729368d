"""Runs whose storage misbehaves: an outage of the bucket mid-run (fault injection through the GCS
fake), an output made read-only, a table path that is a file, a dead lock holder. Each run stops
in bounded time with its finished units kept, one summary JSON line and a non-zero exit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml
from memloop.jobs.commands.cli import app
from memloop.jobs.errors import LockHeldError, StorageError
from memloop.jobs.store.run_store import RunStore
from typer.testing import CliRunner

from tests.http_server import serve_app
from tests.jobs.gcs_fake import PreconditionGCS
from tests.jobs.scripted_endpoint import _app as scripted_app
from tests.jobs.scripted_endpoint import scripted_endpoint

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def slow_endpoint(delay_s: float = 0.3) -> Iterator[str]:
    """The scripted model, answering after `delay_s`: units finish one by one, each in its own shard."""
    app = scripted_app([])

    @app.middleware("http")
    async def slow(request, call_next):
        await asyncio.sleep(delay_s)
        return await call_next(request)

    with serve_app(app) as url:
        yield url


def samples_shards(server: PreconditionGCS) -> int:
    return sum("/samples/" in name for objs in server.storage.objects.values() for name in objs)


def _cfg(tmp_path: Path, output: str, url: str, entities: int = 6) -> Path:
    cfg = {
        "name": "faults",
        "output": output,
        "flush_units": 1,
        "flush_s": 0.1,
        "retries": 0,
        "datasets": [{"task": "sumie", "synthetic": {"entities": entities, "seed": 5}, "options": {"max_chunks": 1}}],
        "methods": [{"name": "gu-json", "options": {"max_attempts": 1, "max_tokens": 16}}],
        "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "m", "max_concurrency": 1}},
        "judge_cpus": 0.25,
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture()
def bucket(monkeypatch):
    """A GCS fake of its own (its outage harms no other test), with short storage deadlines."""
    import memloop.jobs.store.gcs as gcs

    server = PreconditionGCS("outage")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.port}")
    monkeypatch.setattr(gcs, "STORAGE_DEADLINE_S", 3.0)
    monkeypatch.setattr(gcs, "STORAGE_DOWN_DEADLINE_S", 1.0)
    yield server
    server.stop()


def test_a_bucket_outage_mid_run_stops_cleanly_and_the_rerun_resumes(ray_local, tmp_path, bucket) -> None:
    bucket.fault = lambda method, path: samples_shards(bucket) >= 1  # down once the first shard is written
    with slow_endpoint() as url:
        cfg = _cfg(tmp_path, "gs://outage/runs", url)
        res = CliRunner().invoke(app, ["run", str(cfg)])
        assert res.exit_code == 4, res.output
        summary = json.loads(res.stdout.strip().splitlines()[-1])
        assert summary["exit_code"] == 4 and "cannot write gs://outage/runs/" in summary["storage_error"]
        # bounded by the storage's deadline (3 s here), not minutes of retries: the error names the bound it ran under
        assert "(gave up after 3 s)" in summary["storage_error"], summary["storage_error"]
        kept = summary["computed"]
        assert kept >= 1 and summary["unsaved"] >= 1 and kept + summary["unsaved"] <= 6, summary
        assert "stopped: the storage failed" in res.stderr and "Traceback" not in res.output
        print(f"\nbucket outage: {[x for x in res.stderr.splitlines() if x.startswith('stopped:')][0]}")
        assert bucket.refused > 0
        bucket.fault = None  # storage is back: the same config resumes and computes the rest once
        done_before = RunStore.at(summary["output"]).done_units()  # (a unit the method failed is done again)
        res = CliRunner().invoke(app, ["run", str(cfg)])
        assert res.exit_code == 0, res.output
        again = json.loads(res.stdout.strip().splitlines()[-1])
        assert again["skipped"] == len(done_before) and again["computed"] == 6 - len(done_before), again
    samples = RunStore.at(summary["output"]).table("samples").to_pandas()
    assert len(samples) == 6 and samples["unit"].is_unique


def _rid(cfg: Path) -> str:
    from memloop.jobs.run.config import load_config
    from memloop.jobs.run.plan import run_id

    return run_id(load_config(cfg))


def test_a_table_path_that_is_a_file_is_refused_before_work(tmp_path) -> None:
    with scripted_endpoint() as (url, seen):
        cfg = _cfg(tmp_path, str(tmp_path / "runs"), url, entities=2)
        run_dir = tmp_path / "runs" / _rid(cfg)
        run_dir.mkdir(parents=True)
        (run_dir / "steps").write_text("a file where the steps folder goes")
        res = CliRunner().invoke(app, ["run", str(cfg)])
        assert isinstance(res.exception, StorageError), res.output
        assert str(res.exception) == (
            f"`output`: {run_dir / 'steps'} is not a directory (it is a file), so the run "
            "cannot write under it; move or delete that file, or choose another `output`"
        )
        assert seen == []  # refused before any unit was computed


def test_a_lock_held_by_a_killed_process_on_this_host_is_taken_over_at_once(ray_local, tmp_path) -> None:
    """kill -9 leaves the lock behind; its holder's PID is dead on this host, so the next run takes it."""
    with scripted_endpoint() as (url, _):
        cfg = _cfg(tmp_path, str(tmp_path / "runs"), url, entities=2)
        rid = _rid(cfg)
        holder = (
            "import os, signal, sys; from memloop.jobs.store.run_store import RunStore; "
            f"RunStore.open({str(tmp_path / 'runs')!r}, {rid!r}).acquire_lock('killed (x)'); "
            "print('held', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
        )
        out = subprocess.run([sys.executable, "-c", holder], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == -signal.SIGKILL and out.stdout == "held\n", out.stderr
        assert (tmp_path / "runs" / rid / ".lock").is_file()
        res = CliRunner().invoke(app, ["run", str(cfg)])
        assert res.exit_code == 0, res.output
        assert (
            "took over the run lock of 'killed (x)'" in res.stderr
            and "its process is gone from this host" in res.stderr
        )
        assert json.loads(res.stdout.strip().splitlines()[-1])["computed"] == 2
        assert not (tmp_path / "runs" / rid / ".lock").exists()


def test_a_live_holder_on_this_host_is_still_refused(tmp_path) -> None:
    rs = RunStore.open(str(tmp_path / "runs"), "r")
    lock = rs.acquire_lock("first")
    with pytest.raises(LockHeldError, match="is being computed by 'first'"):
        rs.acquire_lock("second")
    lock.release()
    rs.acquire_lock("third").release()


@contextlib.contextmanager
def _tmpfs(path: Path) -> Iterator[Callable[[], None]]:
    """A small tmpfs at `path`; yields a function that remounts it read-only (skips where mounting
    is not permitted: root in a privileged container can, others cannot)."""
    path.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m", "memloop-test", str(path)], capture_output=True
        ).returncode
    ):
        pytest.skip("needs to mount a tmpfs (root) to make an output read-only: root ignores file modes")
    try:
        yield lambda: subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_an_output_made_read_only_mid_run_ends_with_one_line_and_the_summary(ray_local, tmp_path) -> None:
    with _tmpfs(tmp_path / "out") as make_read_only, slow_endpoint() as url:
        cfg = _cfg(tmp_path, str(tmp_path / "out" / "runs"), url)
        samples = tmp_path / "out" / "runs" / _rid(cfg) / "samples"

        def watch() -> None:  # read-only once the first shard is committed
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (samples.is_dir() and any(samples.glob("*.parquet"))):
                time.sleep(0.05)
            make_read_only()

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        res = CliRunner().invoke(app, ["run", str(cfg)])
        t.join()
        assert res.exit_code == 4, res.output
        assert "Traceback" not in res.output
        summary = json.loads(res.stdout.strip().splitlines()[-1])
        assert "Read-only file system" in summary["storage_error"] and summary["unsaved"] >= 1
        stopped = [line for line in res.stderr.splitlines() if line.startswith("stopped:")]
        assert len(stopped) == 1 and "Read-only file system" in stopped[0]
        print(f"\nread-only output: {stopped[0]}\n{res.stdout.strip().splitlines()[-1]}")
        kept = RunStore.at(summary["output"]).table("samples")
        assert kept.num_rows == summary["computed"] + summary["failed"] >= 1 and summary["failed"] >= 0


def test_a_rerun_with_nothing_to_compute_compacts_what_a_failed_compaction_left(ray_local, tmp_path) -> None:
    """`shard_rows: 1` stands in for a compaction that failed: every unit stays in a shard of its own. Once,
    later runs never compacted again (a run with nothing to compute took no lock and merged nothing); now the
    rerun merges the earlier invocation's small shards, and the tables read the same."""
    from memloop.jobs.run.config import load_config
    from memloop.jobs.run.driver import execute
    from memloop.jobs.run.plan import make_plan

    from tests.jobs.scripted_endpoint import attribute_table_answer

    with scripted_endpoint(attribute_table_answer) as (url, _):
        path = _cfg(tmp_path, str(tmp_path / "runs"), url, entities=4)
        cfg = load_config(path)
        first = execute(make_plan(cfg.model_copy(update={"shard_rows": 1})), log=lambda m: None)
        shards = first.stats["shards"]["after"]
        assert first.computed == 4 and first.failed == first.method_failed == 0 and shards >= 2, first.stats
        before = RunStore.at(first.output).table("samples").to_pandas().drop(columns=["shard"])
        again = execute(make_plan(cfg), log=lambda m: None)
    assert (again.run_id, again.computed, again.skipped, again.exit_code(0.0)) == (first.run_id, 0, 4, 0)
    assert again.stats["shards"] == {"before": shards, "after": 1}
    assert len(list((Path(first.output) / "samples").glob("*.parquet"))) == 1
    after = RunStore.at(first.output).table("samples").to_pandas().drop(columns=["shard"])
    key = ["unit", "status", "output_json"]
    assert after[key].sort_values("unit").values.tolist() == before[key].sort_values("unit").values.tolist()
