"""Which Ray a run uses: a private local instance unless an address is given. A stale pointer to the
host's last `ray start` (`ray_current_cluster`, naming a cluster that has since died) is ignored, and
an address that cannot be joined fails in seconds with one line and exit 2. Each test gives Ray a
private RAY_TMPDIR, so no pointer is left behind for other processes of this host."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.jobs.scripted_endpoint import scripted_endpoint

ROOT = Path(__file__).resolve().parents[2]


def _dead_address() -> str:
    with socket.socket() as s:  # a port nothing listens on once the socket is closed
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture()
def ray_tmpdir() -> Iterator[Path]:
    """A short private RAY_TMPDIR (Ray's socket paths must stay under 107 bytes), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _memloop(args: list[str], tmpdir: Path, timeout: float, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    full = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    full.update(PYTHONPATH=str(ROOT), RAY_TMPDIR=str(tmpdir), **env)
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "memloop.jobs.commands.cli", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return res, time.monotonic() - t0


def _config(tmp_path: Path, url: str) -> Path:
    cfg = {
        "name": "ray-address",
        "output": str(tmp_path / "runs"),
        "retries": 0,
        "judge_cpus": 0.25,
        "datasets": [{"task": "sumie", "synthetic": {"entities": 2, "seed": 5}, "options": {"max_chunks": 1}}],
        "methods": [{"name": "gu-json", "options": {"max_attempts": 1}}],
        "judges": [{"name": "sumie-exact"}],
        "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "m", "max_concurrency": 2}},
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_stale_pointer_to_a_dead_cluster_is_ignored(tmp_path, ray_tmpdir) -> None:
    """`ray_current_cluster` names a dead address (a `ray start` long gone): the run starts its own
    instance and finishes (it used to retry that address for minutes)."""
    (ray_tmpdir / "ray").mkdir()
    (ray_tmpdir / "ray" / "ray_current_cluster").write_text(_dead_address())
    with scripted_endpoint() as (url, _):
        res, took = _memloop(["run", str(_config(tmp_path, url))], ray_tmpdir, timeout=150)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ray: a private local instance" in res.stderr and "Traceback" not in res.stderr
    assert '"computed": 2' in res.stdout
    print(f"\nrun beside a stale ray_current_cluster: {took:.1f} s")


@pytest.mark.parametrize("how", ["RAY_ADDRESS", "ray://", "--address"])
def test_an_address_that_cannot_be_joined_fails_in_seconds_in_one_line(tmp_path, ray_tmpdir, how) -> None:
    address = ("ray://" if how == "ray://" else "") + _dead_address()  # a cluster's address, or a Ray client's
    with scripted_endpoint() as (url, _):
        args = ["run", str(_config(tmp_path, url))] + (["--address", address] if how == "--address" else [])
        env = {} if how == "--address" else {"RAY_ADDRESS": address}
        res, took = _memloop(args, ray_tmpdir, timeout=90, **env)
    assert res.returncode == 2, res.stderr[-3000:]
    print(f"\nunreachable address refused in {took:.1f} s")  # retrying it for minutes fails the 90 s timeout
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: RunError: ") and address in errors[0], res.stderr[-3000:]
    assert "unset RAY_ADDRESS" in errors[0] or "unset it" in errors[0]
    assert "Traceback" not in res.stderr
