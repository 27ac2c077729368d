"""A small run config for the command-line tests: one engine actor on half a CPU, no retries, its runs under
the test's tmp_path; each test file names its own datasets and methods."""

from __future__ import annotations

from pathlib import Path

import yaml


def small_config(tmp_path: Path, name: str, datasets: list[dict], methods: list[dict]) -> dict:
    """The config as a dict (a test replaces whole top-level sections with `small_config(...) | over`)."""
    return {
        "name": name,
        "output": str(tmp_path / "runs"),
        "datasets": datasets,
        "methods": methods,
        "engine": {"actors": 1, "cpus_per_actor": 0.5, "max_in_flight": 2, "start_timeout_s": 300},
        "judge_cpus": 0.25,
        "retries": 0,
    }


def write_config(tmp_path: Path, cfg: dict) -> Path:
    """`cfg` as tmp_path/cfg.yaml, for `memloop run PATH`."""
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path
