"""A burst of requests on a freshly started `memloop serve` while its engine still compiles: /health says
"warming up" until the warm-up is done, and every request gets either its answer or, at once, a 503 with
Retry-After; none waits behind the compiles until its client gives up."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

BURST = 200
CLIENT_TIMEOUT_S = 60.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(600)
def test_a_burst_on_a_fresh_server_is_answered_or_told_to_retry(tmp_path) -> None:
    port = _port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from memloop.jobs.commands.cli import main; main()",
            "serve",
            "--port",
            str(port),
            "--kv-budget",
            str(64 << 20),
            "--max-batch",
            "4",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "serve.log", "w"),
        env=env,
    )
    try:
        deadline = time.time() + 300
        first = None
        while first is None and time.time() < deadline:  # the model loads before the port opens
            try:
                first = httpx.get(f"{base}/health", timeout=5)
            except httpx.HTTPError:
                time.sleep(0.05)
        assert first is not None, (tmp_path / "serve.log").read_text()[-2000:]
        # the first compile of a step takes seconds: the server has just started warming up
        assert first.status_code == 503 and first.json()["status"] == "warming up", first.text
        assert int(first.headers["Retry-After"]) > 0
        body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0}

        def ask(_: int) -> tuple[int, float, httpx.Response | None]:
            start = time.monotonic()
            try:
                r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT_S)
            except httpx.TimeoutException:
                return -1, time.monotonic() - start, None
            return r.status_code, time.monotonic() - start, r

        with ThreadPoolExecutor(max_workers=50) as pool:
            answers = list(pool.map(ask, range(BURST)))
        statuses = [s for s, _, _ in answers]
        assert -1 not in statuses, f"{statuses.count(-1)} requests waited past {CLIENT_TIMEOUT_S} s"
        assert set(statuses) <= {200, 429, 503}, statuses
        for status, _, r in answers:
            if status == 200:
                assert r.json()["choices"][0]["message"]["content"] is not None
                assert r.json()["usage"]["completion_tokens"] >= 1
            else:  # told to come back, with when
                assert int(r.headers["Retry-After"]) > 0 and r.json()["error"]["message"], r.text
        assert 503 in statuses  # the burst came while the server warmed up
        while time.time() < deadline:  # then the server says it is ready, and answers
            health = httpx.get(f"{base}/health", timeout=5)
            if health.status_code == 200:
                break
            assert health.json()["status"] == "warming up", health.text
            time.sleep(0.5)
        assert health.json() == {"ok": True}
        r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT_S)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
