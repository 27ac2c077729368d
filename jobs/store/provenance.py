"""Where a run's results come from: the code that computes them, its version, and the Ray job.

- `code_digest()`: sha256 of the result-affecting source, the files of `engine/` and `eval/`
  (model, decoding, methods, templates, judges, datasets). It is part of the run id, so a nightly
  after a code change computes afresh instead of resuming yesterday's results. Changes to `jobs/`
  (orchestration, storage, reports) or `bench/` keep the id: they do not change what a unit computes.
- `code_version()`: the git commit of a checkout, else the commit baked into the package at build
  time (`jobs/store/build_info.json`, written by `python -m memloop.jobs.store.provenance --write` in the Makefile and
  the container build), else the package version.
- `ray_job_id()`: the `ray job submit` submission id when the driver runs as a Ray job.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT_PACKAGES = ("engine", "eval")
SOURCE_SUFFIXES = (".py", ".txt", ".jinja", ".json", ".yaml", ".cc", ".h")  # .h: the kernels' headers
BUILD_INFO = Path(__file__).with_name("build_info.json")


@lru_cache(maxsize=1)
def code_digest() -> str:
    h = hashlib.sha256()
    for pkg in RESULT_PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*")):
            if f.is_file() and f.suffix in SOURCE_SUFFIXES and "__pycache__" not in f.parts:
                h.update(f.relative_to(ROOT).as_posix().encode() + b"\0")
                h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def git_describe() -> str | None:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def package_version() -> str:
    try:
        return metadata.version("memloop")
    except metadata.PackageNotFoundError:
        return "unknown"


def code_version() -> str:
    """`git:<describe>` of a checkout, `build:<commit>` of an installed build, else `memloop==<version>`."""
    described = git_describe()
    if described:
        return f"git:{described}"
    try:
        commit = json.loads(BUILD_INFO.read_text()).get("commit")
    except (OSError, ValueError):
        commit = None
    if commit:
        return f"build:{commit}"
    return f"memloop=={package_version()}"


def ray_job_config() -> dict | None:
    """The job config Ray's job supervisor hands the entrypoint process, or None outside a Ray job."""
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def ray_job_id() -> str | None:
    cfg = ray_job_config()
    return (cfg or {}).get("metadata", {}).get("job_submission_id")


def write_build_info() -> Path:
    """Record the checkout's commit next to the package, for installs and images without `.git`."""
    described = git_describe()
    if described is None:
        raise SystemExit("no git checkout here: set the commit with MEMLOOP_COMMIT or build from a clone")
    BUILD_INFO.write_text(json.dumps({"commit": described}) + "\n")
    return BUILD_INFO


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        commit = os.environ.get("MEMLOOP_COMMIT")
        if commit:
            BUILD_INFO.write_text(json.dumps({"commit": commit}) + "\n")
            print(BUILD_INFO)
        else:
            print(write_build_info())
    else:
        print(code_version())
