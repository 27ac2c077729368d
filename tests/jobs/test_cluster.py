"""A fake multi-host TPU cluster on one machine: the driver's placement puts one engine actor per host.

Runs in a subprocess because it needs its own Ray cluster (the suite shares one local Ray). The
actors are a small host probe rather than the engine: placement is decided by `actor_options` and
`start_actors` (the driver's own code), and three JAX engines would not fit on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import ray
    from ray.cluster_utils import Cluster
    from memloop.jobs.run.config import parse_config
    from memloop.jobs.run.actors import start_actors
    from memloop.jobs.errors import RunError

    class HostProbe:
        def __init__(self, **kwargs):
            self.node = ray.get_runtime_context().get_node_id()
        def health(self):
            return True
        def node_id(self):
            return self.node

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    hosts = {}
    for slice_name, worker in [("slice-a", 0), ("slice-a", 1), ("slice-b", 0)]:
        node = cluster.add_node(num_cpus=2, resources={"TPU": 4},
                                labels={"ray.io/tpu-slice-name": slice_name, "ray.io/tpu-worker-id": str(worker)})
        hosts[node.node_id] = slice_name
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()

    def cfg(**engine):
        return parse_config({"datasets": [{"task": "book", "path": "x"}], "methods": [{"name": "inc-update"}],
                             "engine": dict(accelerator="tpu", tpu_chips_per_host=4, cpus_per_actor=1,
                                            start_timeout_s=5, **engine)})

    out = {}
    actors = start_actors(cfg(actors=3).engine, HostProbe, {}, lambda m: None)
    out["all"] = [hosts[n] + ":" + n[:8] for n in ray.get([a.node_id.remote() for a in actors])]
    for a in actors:
        ray.kill(a)
    actors = start_actors(cfg(actors=2, tpu_slice="slice-a").engine, HostProbe, {}, lambda m: None)
    out["slice_a"] = [hosts[n] + ":" + n[:8] for n in ray.get([a.node_id.remote() for a in actors])]
    for a in actors:
        ray.kill(a)
    try:
        start_actors(cfg(actors=4).engine, HostProbe, {}, lambda m: None)
        out["too_many"] = "started"
    except RunError as exc:
        out["too_many"] = str(exc)
    print(json.dumps(out))
    ray.shutdown()
    cluster.shutdown()
""")


def test_one_engine_actor_per_tpu_host() -> None:
    tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # the Cluster's address pointer goes there, not /tmp/ray
    try:
        res = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=240,
            env=dict(os.environ, RAY_TMPDIR=tmp),
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(set(out["all"])) == 3  # three actors on three distinct hosts
    assert len(set(out["slice_a"])) == 2 and all(h.startswith("slice-a:") for h in out["slice_a"])
    assert "did not start" in out["too_many"] and "engine.actors" in out["too_many"]  # a 4th host does not exist


def test_actor_options_per_accelerator() -> None:
    from memloop.jobs.run.actors import actor_options
    from memloop.jobs.run.config import EngineSpec

    assert actor_options(EngineSpec(cpus_per_actor=2)) == {"max_restarts": 3, "max_task_retries": 0, "num_cpus": 2.0}
    gpu = actor_options(EngineSpec(accelerator="gpu", gpus_per_actor=1))
    assert gpu["num_gpus"] == 1 and "resources" not in gpu
    tpu = actor_options(EngineSpec(accelerator="tpu", tpu_chips_per_host=8, tpu_slice="pod-a", max_restarts=5))
    assert tpu["resources"] == {"TPU": 8.0} and tpu["max_restarts"] == 5
    assert tpu["label_selector"] == {"ray.io/tpu-slice-name": "pod-a"}
