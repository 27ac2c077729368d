"""Runs whose storage misbehaves: an outage of the bucket mid-run (fault injection through the GCS
fake), an output made read-only, a table path that is a file, a dead lock holder. Each run stops
in bounded time with its finished units kept, one summary JSON line and a non-zero exit."""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from typer.testing import CliRunner

from jobs.cli import app
from jobs.storage import RunStore
from tests.jobs.gcs_fake import PreconditionGCS
from tests.http_server import serve_app
from tests.jobs.scripted_endpoint import _app as scripted_app


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
    cfg = {"name": "faults", "output": output, "flush_units": 1, "flush_s": 0.1, "retries": 0,
           "datasets": [{"task": "sumie", "synthetic": {"entities": entities, "seed": 5}, "options": {"max_chunks": 1}}],
           "methods": [{"name": "gu-json", "options": {"max_attempts": 1, "max_tokens": 16}}],
           "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "m", "max_concurrency": 1}},
           "judge_cpus": 0.25}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture()
def bucket(monkeypatch):
    """A GCS fake of its own (its outage harms no other test), with short storage deadlines."""
    import jobs.storage

    server = PreconditionGCS("outage")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.port}")
    monkeypatch.setattr(jobs.storage, "STORAGE_DEADLINE_S", 3.0)
    monkeypatch.setattr(jobs.storage, "STORAGE_DOWN_DEADLINE_S", 1.0)
    yield server
    server.stop()


def test_a_bucket_outage_mid_run_stops_cleanly_and_the_rerun_resumes(ray_local, tmp_path, bucket) -> None:
    bucket.fault = lambda method, path: samples_shards(bucket) >= 1  # down once the first shard is written
    with slow_endpoint() as url:
        cfg = _cfg(tmp_path, "gs://outage/runs", url)
        t0 = time.monotonic()
        res = CliRunner().invoke(app, ["run", str(cfg)])
        took = time.monotonic() - t0
        assert res.exit_code == 4, res.output
        assert took < 60, took  # bounded: the storage's deadline, not minutes of retries
        summary = json.loads(res.stdout.strip().splitlines()[-1])
        assert summary["exit_code"] == 4 and "cannot write gs://outage/runs/" in summary["storage_error"]
        kept = summary["computed"]
        assert kept >= 1 and summary["unsaved"] >= 1 and kept + summary["unsaved"] <= 6, summary
        assert "stopped: the storage failed" in res.stderr and "Traceback" not in res.output
        assert bucket.refused > 0
        bucket.fault = None  # storage is back: the same config resumes and computes the rest once
        res = CliRunner().invoke(app, ["run", str(cfg)])
        assert res.exit_code == 0, res.output
        again = json.loads(res.stdout.strip().splitlines()[-1])
        assert again["skipped"] == kept and again["computed"] == 6 - kept, again
    samples = RunStore.at(summary["output"]).table("samples").to_pandas()
    assert len(samples) == 6 and samples["unit"].is_unique and (samples["status"] == "ok").all()
