"""Stopping `memloop run` with SIGTERM (`ray job stop`, a pod's end) or Ctrl-C while lanes are mid-unit
and judge tasks run: the run stops in seconds with the "resumable" line and exit 130, no new Ray work
starts after the stop (no second Ray instance whose agents outlive the run), no process of its Ray is
left, and the resume computes every unit exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from memloop.jobs.store.run_store import RunStore

from tests.jobs.scripted_endpoint import attribute_table_answer, scripted_endpoint
from tests.jobs.test_ray_address import ROOT, ray_tmpdir  # noqa: F401  (the fixture)

ENTITIES = 4


def _config(tmp_path: Path, url: str) -> Path:
    import yaml

    cfg = {
        "name": "stop",
        "output": str(tmp_path / "runs"),
        "retries": 0,
        "judge_cpus": 0.25,
        "flush_units": 1,
        "flush_s": 0.2,
        "datasets": [{"task": "sumie", "synthetic": {"entities": ENTITIES, "seed": 7}, "options": {"max_chunks": 2}}],
        "methods": [{"name": "gu-json", "options": {"max_attempts": 1}}],
        "judges": [{"name": "sumie-exact"}],
        "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "m", "max_concurrency": 4}},
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _processes_under(path: Path) -> list[str]:
    """Command lines of live processes that name `path` (Ray's processes carry their temp dir)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmd:
                out.append(f"{pid}: {cmd[:200]}")
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "kill-9"])
def test_a_stopped_run_leaves_no_ray_behind_and_resumes_every_unit_once(tmp_path, ray_tmpdir, sig) -> None:
    """SIGINT takes SIGTERM's path (tests/jobs/test_driver.py sends both, with the engine); kill -9 leaves
    the lock (taken over at once: its holder is gone) and unrecorded units, which the resume computes."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(ROOT), RAY_TMPDIR=str(ray_tmpdir))
    with scripted_endpoint(attribute_table_answer, delay_s=0.3) as (url, _):
        cfg = _config(tmp_path, url)
        cmd = [sys.executable, "-m", "memloop.jobs.commands.cli", "run", str(cfg), "--json"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 180
            while not list((tmp_path / "runs").glob("*/samples/*.parquet")):
                assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
                time.sleep(0.1)
            t0 = time.monotonic()
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=120)
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
        if sig == signal.SIGKILL:
            assert proc.returncode == -9
        else:
            assert proc.returncode == 130, err[-3000:]
            assert "interrupted: finished units are saved; run the same config again to resume" in err
            # --json promises one object on stdout: an interrupted run's says so (it once printed nothing)
            last = json.loads(out.strip().splitlines()[-1])
            assert last["interrupted"] is True and last["exit_code"] == 130 and last["run_id"].startswith("stop-")
            assert Path(last["output"]).parent == tmp_path / "runs"
        assert "Traceback" not in err and "Started a local Ray instance" not in err, err[-3000:]
        # a stop that never ends fails the communicate() above; how long it took is the host's business
        print(f"\n{signal.Signals(sig).name}: stopped in {took:.1f} s")
        left: list[str] = []
        for _ in range(20):  # Ray's processes exit with their raylet, within seconds
            left = _processes_under(ray_tmpdir)
            if not left:
                break
            time.sleep(0.5)
        assert not left, left
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
    out = next((tmp_path / "runs").iterdir())
    samples = RunStore.at(str(out)).table("samples").to_pandas()
    assert len(samples) == ENTITIES and samples["unit"].is_unique and (samples["status"] == "ok").all()
    scores = RunStore.at(str(out)).table("scores").to_pandas()
    assert set(scores["unit"]) == set(samples["unit"])
    # no file of a shard that was never committed stays (kill -9 between a shard's parts and its commit)
    from memloop.jobs.store.run_files import shard_of

    committed = {shard_of(p.stem) for p in (out / "samples").glob("*.parquet")}
    strays = [
        p.name
        for t in ("steps", "judgments", "scores")
        for p in (out / t).glob("*.parquet")
        if shard_of(p.stem) not in committed
    ]
    assert strays == [], strays


def test_no_ray_work_starts_after_the_runs_ray_is_shut_down(ray_tmpdir) -> None:
    """A lane that finishes its unit after the stop shut Ray down calls `.remote()`: Ray used to start a
    second local instance there (its agents outlived the run); now the call fails and nothing starts."""
    code = """
import ray
from memloop.jobs.run.actors import ensure_ray
ensure_ray(lambda m: None)
ray.shutdown()
try:
    ray.remote(lambda: 1).remote()
    print("STARTED", ray.is_initialized(), flush=True)
    ray.shutdown()
except Exception as exc:
    print("REFUSED", type(exc).__name__, flush=True)
"""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(ROOT), RAY_TMPDIR=str(ray_tmpdir))
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("REFUSED"), res.stdout + res.stderr[-2000:]
    assert len(list((ray_tmpdir / "ray").glob("session_2*"))) == 1  # one Ray instance, not two
