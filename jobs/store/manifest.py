"""The `runs` manifest row: what produced a run (code, packages, model, templates) and how it went."""

from __future__ import annotations

import datetime as dt
import json
import socket
import time
import uuid
from importlib import metadata
from typing import Any, Protocol

from memloop.jobs.store.provenance import code_version, ray_job_id
from memloop.jobs.store.tables import now

PACKAGES = (
    "memloop",
    "jax",
    "jaxlib",
    "flax",
    "ray",
    "pyarrow",
    "transformers",
    "tokenizers",
    "llguidance",
    "numpy",
    "sentence-transformers",
    "rouge-score",
    "google-cloud-storage",
)


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


class PlanLike(Protocol):
    """What the manifest reads of a run plan (`memloop.jobs.run.plan.RunPlan`, a floor above)."""

    config: Any
    identity: dict[str, Any]
    model_digest: str


def manifest_base(plan: PlanLike, invocation: str, output: str) -> dict[str, Any]:
    cfg = plan.config
    return {
        "invocation": invocation,
        "output": output,
        "config_json": json.dumps(cfg.model_dump(), sort_keys=True),
        "identity_json": json.dumps(plan.identity, sort_keys=True, default=str),
        "code_version": code_version(),
        "packages_json": json.dumps(package_versions(), sort_keys=True),
        "model_digest": plan.model_digest,
        "template_hashes_json": json.dumps(plan.identity["templates"], sort_keys=True),
        "ray_job_id": ray_job_id(),
        "host": socket.gethostname(),
    }


def invocation_id() -> str:
    """A new invocation's id: its start time, then 8 random hex digits (two drivers never share one)."""
    return f"{now().strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def finished_manifest(
    base: dict[str, Any],
    *,
    started: dt.datetime,
    t0: float,
    samples: int,
    computed: int,
    skipped: int,
    failed: int,
    stats: dict[str, Any],
) -> dict[str, Any]:
    """The manifest row of an invocation that has ended (a run's or a re-judging's): `base` with its
    times (`t0` is its `time.monotonic()` start), its unit counts and its stats."""
    return dict(
        base,
        started_at=started,
        finished_at=now(),
        wall_s=time.monotonic() - t0,
        samples=samples,
        computed=computed,
        skipped=skipped,
        failed=failed,
        stats_json=json.dumps(stats, default=str),
    )
