"""One bad request never harms another: request bounds in the engine, and the server's limits
(streamed body limit, tokenising off the event loop, bounded queue, cancel on disconnect, timeout,
API key, option checks), each against the real engine on the bundled model and real uvicorn."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from memloop.engine.errors import RequestError

from tests.http_server import serve_app  # noqa: F401  (the fuzz test imports it from here too)

ROOT = Path(__file__).resolve().parents[2]
LONG = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 400, "temperature": 0, "stop_token_ids": []}


def wait_for(predicate: Any, what: str, limit_s: float = 120) -> None:
    """Poll until `predicate()` holds (a hang guard, not a performance bound)."""
    deadline = time.time() + limit_s
    while not predicate():
        assert time.time() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


# -- the engine: bad values are the bad request's own error ------------------------------------------


@pytest.mark.parametrize("sampling", [{"top_k": 2**31, "temperature": 1.0}, {"seed": 2**63, "temperature": 1.0}])
def test_an_unrepresentable_value_fails_only_its_own_request(engine, sampling):
    good = engine.submit({"prompt": "The capital of France is", "sampling": {"max_tokens": 3}})
    bad = engine.submit({"prompt": "Hello", "sampling": {"max_tokens": 3, **sampling}})
    assert good.result(timeout=300)["finish_reason"] in ("stop", "length")
    with pytest.raises(RequestError):
        bad.result(timeout=300)
    assert engine.health()


def test_a_deeply_nested_schema_is_a_request_error(engine):
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(RequestError, match="nests deeper"):
        engine.submit({"prompt": "x", "sampling": {"max_tokens": 2}, "json_schema": schema}).result(timeout=60)


def test_cancel_takes_a_request_out_of_the_batch(make_engine):
    eng = make_engine()
    fut = eng.submit({"prompt": LONG["prompt"], "sampling": {"max_tokens": 400, "stop_token_ids": []}})
    wait_for(lambda: eng.stats()["running"] == 1, "the request to run")
    eng.cancel(fut)
    with pytest.raises(RequestError, match="cancelled"):
        fut.result(timeout=120)
    s = eng.stats()
    assert s["cancelled_requests"] == 1 and s["running"] == 0 and s["waiting"] == 0
    assert eng.complete({"prompt": "One, two,", "sampling": {"max_tokens": 2}}, timeout=300)["text"] is not None


# -- the server ----------------------------------------------------------------------------------------


def _app(engine: Any, **kw: Any) -> Any:
    from memloop.engine.serve.server import create_app

    kw.setdefault("max_body_bytes", 64 * 1024)
    return create_app(engine, "smollm2", **kw)


def test_a_chunked_upload_over_the_limit_gets_413_without_being_read(engine):
    sent = 0

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body arrives chunked
        nonlocal sent
        yield b'{"prompt": "'
        for _ in range(20 * 16):  # 20 MB of prompt
            sent += 64 * 1024
            yield b"y" * (64 * 1024)
        yield b'", "max_tokens": 2}'

    with serve_app(_app(engine)) as url:
        r = httpx.post(
            f"{url}/v1/completions", content=chunks(), headers={"content-type": "application/json"}, timeout=300
        )
        assert r.status_code == 413, r.text
        assert "body over 65536 bytes" in r.json()["error"]["message"]
        assert httpx.get(f"{url}/health").json() == {"ok": True}


def test_tokenising_runs_off_the_event_loop(engine):
    """The event loop thread never runs `submit` (tokenising, grammar compiling), so /health stays fast."""
    threads: list[int] = []

    class Recording:  # the real engine, noting the thread that submits
        def __getattr__(self, name: str) -> Any:
            return getattr(engine, name)

        def submit(self, request: dict[str, Any]) -> Any:
            threads.append(threading.get_ident())
            return engine.submit(request)

    loop_thread: list[int] = []
    app = _app(Recording())

    @app.get("/loop-thread")
    async def where() -> dict[str, Any]:
        loop_thread.append(threading.get_ident())
        return {}

    with serve_app(app) as url:
        httpx.get(f"{url}/loop-thread")
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "Hello", "max_tokens": 1}, timeout=300)
        assert r.status_code == 200, r.text
    assert threads and loop_thread and loop_thread[0] not in threads


def _hold_a_long_request(url: str) -> socket.socket:
    """Send LONG over a raw socket (closing it later is a client disconnect)."""
    import json

    body = json.dumps(LONG).encode()
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    return sock


def test_a_full_queue_answers_429_and_a_disconnect_cancels(make_engine):
    eng = make_engine()
    with serve_app(_app(eng, max_queue=1)) as url:
        stats = lambda: httpx.get(f"{url}/v1/stats").json()  # noqa: E731
        sock = _hold_a_long_request(url)
        wait_for(lambda: stats()["running"] == 1, "the long request to run")
        busy = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
        assert "--max-queue 1" in busy.json()["error"]["message"]
        sock.close()  # the client goes away: its engine request leaves the batch
        wait_for(lambda: stats()["cancelled_requests"] == 1 and stats()["server_in_flight"] == 0, "the cancel")
        assert stats()["running"] == 0
        ok = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 1}, timeout=300)
        assert ok.status_code == 200, ok.text


def test_a_request_over_the_timeout_gets_504_and_is_cancelled(make_engine):
    eng = make_engine()
    with serve_app(_app(eng, request_timeout=0.5)) as url:
        r = httpx.post(f"{url}/v1/completions", json=LONG, timeout=300)
        assert r.status_code == 504 and "--request-timeout" in r.json()["error"]["message"]
        wait_for(lambda: eng.stats()["cancelled_requests"] == 1 and eng.stats()["running"] == 0, "the cancel")


def test_the_api_key_guards_every_route_but_health(engine):
    with serve_app(_app(engine, api_key="s3cret")) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        for path in ("/v1/models", "/v1/stats", "/docs"):
            assert httpx.get(f"{url}{path}").status_code == 401
            assert httpx.get(f"{url}{path}", headers={"Authorization": "Bearer wrong"}).status_code == 401
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
        assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"]["message"]
        key = {"Authorization": "Bearer s3cret"}
        assert httpx.get(f"{url}/v1/stats", headers=key).status_code == 200
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 1}, headers=key, timeout=300)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "args, says",
    [
        (["--port", "99999"], "--port must be between 1 and 65535, got 99999"),
        (["--port", "0"], "--port must be between 1 and 65535, got 0"),
        (["--port", "-1"], "--port must be between 1 and 65535, got -1"),
        (["--host", "0.0.0.0"], "set MEMLOOP_API_KEY (or pass --api-key-file FILE)"),
    ],
)
def test_memloop_serve_refuses_bad_options_before_starting(args, says):
    env = {k: v for k, v in os.environ.items() if k != "MEMLOOP_API_KEY"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "serve", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and says in lines[0] and "ServerConfigError" in lines[0]
