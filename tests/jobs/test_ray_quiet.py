"""A run's private Ray prints no token-authentication WARNING: the mode is named in Ray's own setting
(RAY_AUTH_MODE=token, what Ray picks by default anyway), so every run's stderr is not opened by a warning."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
START = (
    "from memloop.jobs.run.actors import ensure_ray\n"
    "import ray\n"
    "ensure_ray(lambda m: None)\n"
    "assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42\n"
    "import os; print('mode', os.environ['RAY_AUTH_MODE'])\n"
    "ray.shutdown()\n"
)


@pytest.mark.timeout(300)
def test_a_private_ray_starts_without_the_token_authentication_warning() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run([sys.executable, "-c", START], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "mode token" in res.stdout  # token authentication stays on
    assert "Token authentication" not in res.stderr and "RAY_AUTH_MODE" not in res.stderr, res.stderr[-2000:]
