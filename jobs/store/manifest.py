"""The `runs` manifest row: what produced a run (code, packages, model, templates) and how it went."""

from __future__ import annotations

import json
import socket
from importlib import metadata
from typing import Any, Protocol

from memloop.jobs.store.provenance import code_version, ray_job_id

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
