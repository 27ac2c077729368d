"""The `runs` manifest row: what produced a run (code, packages, model, templates) and how it went."""
from __future__ import annotations

import json
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.plan import RunPlan

if TYPE_CHECKING:
    from jobs.config import RunConfig

PACKAGES = ("memloop", "jax", "jaxlib", "flax", "ray", "pyarrow", "transformers", "tokenizers", "llguidance",
            "numpy", "sentence-transformers", "rouge-score", "google-cloud-storage")


def code_version() -> str:
    """`git describe` of the source tree when it is a checkout (with -dirty), else the package version."""
    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=root,
                             capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return f"git:{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    return f"memloop=={package_versions().get('memloop', 'unknown')}"


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def template_hashes(cfg: "RunConfig") -> dict[str, dict[str, str]]:
    from eval.methods import method_class

    out = {m.key: method_class(m.name).template_hashes() for m in cfg.methods}
    try:
        from eval.judges import judge_template_hashes  # type: ignore[attr-defined]
    except ImportError:
        return out
    for j in cfg.judges:
        out[f"judge:{j.name}"] = judge_template_hashes(j.name)
    return out


def manifest_base(plan: RunPlan, invocation: str, output: str) -> dict[str, Any]:
    cfg = plan.config
    return {
        "invocation": invocation,
        "output": output,
        "config_json": json.dumps(cfg.model_dump(), sort_keys=True),
        "identity_json": json.dumps(plan.identity, sort_keys=True, default=str),
        "code_version": code_version(),
        "packages_json": json.dumps(package_versions(), sort_keys=True),
        "model_digest": plan.model_digest,
        "template_hashes_json": json.dumps(template_hashes(cfg), sort_keys=True),
        "host": socket.gethostname(),
    }
