"""`ray job submit` of `memloop run` to a local two-node Ray cluster (slow: a real cluster with its
job server, two raylets and the engine on a 2-core machine).

The cluster runs in a helper process (ray.cluster_utils.Cluster with the dashboard's job server);
the test submits with the `ray` CLI as an operator would, then reads the job's status and logs and
the run's Parquet rows. A config with a relative output is refused inside the job and the job
fails, rather than writing into Ray's temporary upload folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from memloop.jobs.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))

CLUSTER = textwrap.dedent("""
    import sys, time
    from ray.cluster_utils import Cluster
    port = int(sys.argv[1])
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": port})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    print("READY", flush=True)
    while True:
        time.sleep(1)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _submit(address: str, cfg_path: Path, *args: str) -> tuple[str, str]:
    memloop = str(Path(sys.executable).with_name("memloop"))  # the console script, as an operator submits it
    out = subprocess.run(
        [RAY, "job", "submit", "--address", address, "--no-wait", "--", memloop, "run", str(cfg_path), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    job_id = re.search(r"raysubmit_\w+", text).group(0)
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address)
    deadline = time.time() + 900
    status = client.get_job_status(job_id)
    while time.time() < deadline and not status.is_terminal():
        time.sleep(3)
        status = client.get_job_status(job_id)
    assert status.is_terminal(), f"job {job_id} still {status} after 900 s"
    return str(JobStatus(status).value), client.get_job_logs(job_id)


@pytest.mark.slow
def test_ray_job_submit_to_a_two_node_cluster(tmp_path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # a private Ray temp dir: the cluster's address pointer (ray_current_cluster) is never left in /tmp/ray
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    cluster = subprocess.Popen(
        [sys.executable, "-c", CLUSTER, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert cluster.stdout.readline().strip() == "READY"
        address = f"http://127.0.0.1:{port}"
        cfg = {
            "name": "submitted",
            "output": str(tmp_path / "runs"),
            "datasets": [{"task": "sumie", "synthetic": {"entities": 2, "seed": 1}, "options": {"max_chunks": 1}}],
            "methods": [{"name": "gu-json", "options": {"max_attempts": 1, "max_tokens": 16}}],
            "judges": [{"name": "sumie-exact"}],
            "engine": {"actors": 1, "cpus_per_actor": 1, "max_in_flight": 2, "start_timeout_s": 600},
            "judge_cpus": 0.25,
        }
        cfg_path = tmp_path / "cfg.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        status, logs = _submit(address, cfg_path)
        assert "SUCCEEDED" in status, logs[-3000:]
        last = json.loads(logs.strip().splitlines()[-1])
        assert last["exit_code"] == 0 and last["computed"] == 2
        rs = RunStore.at(last["output"])
        assert len(rs.table("samples")) == 2 and len(rs.table("scores")) > 0
        manifest = rs.table("runs").to_pandas().iloc[0]
        assert manifest["ray_job_id"].startswith("raysubmit_")  # the job is recorded with the run
        # a relative output inside a Ray job is refused (rc 2): the job fails and says why
        cfg_path.write_text(yaml.safe_dump(dict(cfg, output="runs")))
        status, logs = _submit(address, cfg_path)
        assert "FAILED" in status and "temporary upload" in logs, logs[-3000:]
    finally:
        cluster.terminate()
        cluster.wait(timeout=60)
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
