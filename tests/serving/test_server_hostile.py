"""Clients that misbehave, against the real server (uvicorn with the API's protocol) on the real
engine: raw sockets that never finish their headers or body, a DNS-rebinding Host, lone surrogates,
requests that can never be admitted, OpenAI fields memloop does not implement, recursive schemas,
and the API key kept off the command line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http_server import serve_app
from tests.web_hosts import LOOPBACK_HOST_HEADERS

ROOT = Path(__file__).resolve().parents[2]


def _serve(engine: Any, header_timeout_s: float = 10.0, **kw: Any):
    from memloop.engine.serve.server import allowed_hosts_for, create_app, uvicorn_config

    kw.setdefault("allowed_hosts", allowed_hosts_for("127.0.0.1"))
    app = create_app(engine, "smollm2", **kw)
    return serve_app(app, lambda a, h, p: uvicorn_config(a, h, p, "warning", header_timeout_s=header_timeout_s))


def _raw(url: str, data: bytes, wait_s: float = 30) -> bytes:
    """Send `data` on a fresh socket and read the answer until the server closes (or `wait_s`)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out and b'"error"' in out and out.rstrip().endswith(b"}"):
                    break
        except socket.timeout:
            pass
        return out


def _post(url: str, path: str, body: str, host: str | None = None) -> tuple[int, dict]:
    """A POST written by hand, so the body may hold what a JSON library would not send."""
    raw = body.encode()
    h = host or url.removeprefix("http://")
    out = _raw(
        url,
        (
            f"POST {path} HTTP/1.1\r\nHost: {h}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n"
        ).encode()
        + raw,
    )
    head, _, payload = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload or b"{}")


def test_a_lone_surrogate_is_a_400(engine):
    with _serve(engine) as url:
        for path, body in (
            ("/v1/completions", '{"prompt": "a \\ud800 b", "max_tokens": 2}'),
            ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}'),
            ("/v1/completions", '{"prompt": "hi", "stop": ["\\ud800"], "max_tokens": 2}'),
        ):
            status, answer = _post(url, path, body)
            assert status == 400, (path, body, answer)
            assert (
                "holds a lone UTF-16 surrogate" in answer["error"]["message"]
                and "send valid Unicode" in answer["error"]["message"]
            )
        assert httpx.get(f"{url}/health").json() == {"ok": True}


def test_more_choices_than_the_queue_holds_is_a_400_not_a_429(engine):
    with _serve(engine, max_queue=2) as url:
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 1, "n": 3}, timeout=120)
        assert r.status_code == 400 and "Retry-After" not in r.headers
        assert r.json()["error"]["message"] == (
            "this request asks for 3 completions (prompts x n) but the server "
            "admits at most 2 at once (--max-queue); lower n or send fewer prompts"
        )


def test_half_sent_requests_are_closed(engine):
    with _serve(engine, header_timeout_s=1.0, body_timeout_s=1.0) as url:
        host, port = url.removeprefix("http://").split(":")
        socks = []
        for i in range(200):  # headers never finished, with and without an API route
            s = socket.create_connection((host, int(port)), timeout=30)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" if i % 2 else b"GET /v1/mod")
            socks.append(s)
        for s in socks:  # a connection the server kept open fails recv with the socket's 30 s timeout
            assert s.recv(1024) == b""  # closed by the server
            s.close()
        # headers complete, the body never: 408
        out = _raw(url, b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"pro')
        assert out.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in out, out[:300]
        assert httpx.get(f"{url}/health").json() == {"ok": True}


def test_only_loopback_host_names_are_answered(engine):
    with _serve(engine) as url:
        status, answer = _post(url, "/v1/completions", '{"prompt": "Hi", "max_tokens": 1}', host="evil.example:80")
        assert status == 400 and answer["error"]["message"].startswith(
            "Host header 'evil.example:80' is not a name this server answers to"
        )
        assert "--allow-host NAME" in answer["error"]["message"]
        for host in ("localhost", f"localhost:{url.rsplit(':', 1)[1]}", "127.0.0.1", "[::1]:8000"):
            status, _ = _post(url, "/v1/completions", '{"prompt": "Hi", "max_tokens": 1}', host=host)
            assert status == 200, host
    with _serve(engine, allowed_hosts=("localhost", "127.0.0.1", "::1", "box.lan")) as url:
        status, _ = _post(url, "/v1/completions", '{"prompt": "Hi", "max_tokens": 1}', host="box.lan")
        assert status == 200


def test_ipv6_host_headers_are_answered_as_the_viewer_answers_them(engine):
    """The table tests/jobs/test_view.py runs against the viewer: the two guards must agree (the server once
    took a bare `::1`, which is no valid Host header)."""
    with _serve(engine) as url:
        for host, answered in LOOPBACK_HOST_HEADERS.items():
            out = _raw(url, f"GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            head, _, payload = out.partition(b"\r\n\r\n")
            assert int(head.split()[1]) == (200 if answered else 400), (host, out[:300])
            if not answered:
                assert json.loads(payload)["error"]["message"].startswith(f"Host header {host!r} is not a name")


@pytest.mark.parametrize(
    "field, value",
    [
        ("logit_bias", {"50256": -100}),
        ("best_of", 3),
        ("echo", True),
        ("tools", [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]),
        ("tool_choice", "required"),
        ("presence_penalty", 0.5),
        ("frequency_penalty", 1),
        ("suffix", "end"),
    ],
)
def test_unsupported_fields_are_refused_by_name(engine, field, value):
    with _serve(engine) as url:
        path = "/v1/completions" if field in ("best_of", "suffix") else "/v1/chat/completions"  # echo: chat's
        body = {"prompt": "Hi"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "Hi"}]}
        r = httpx.post(f"{url}{path}", json={**body, "max_tokens": 1, field: value}, timeout=120)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"].startswith(f"`{field}` is not supported by this server")
        # the inert values a client sends by default are fine
        r = httpx.post(
            f"{url}{path}",
            json={
                **body,
                "max_tokens": 1,
                "logit_bias": {},
                "presence_penalty": 0,
                "frequency_penalty": 0.0,
                "echo": False,
                "tools": None,
            },
            timeout=120,
        )
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {
            "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
            "$ref": "#/$defs/node",
        },
        {
            "$defs": {
                "a": {"type": "array", "items": {"$ref": "#/$defs/b"}},
                "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]},
            },
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/a"}},
        },
    ],
)
def test_a_recursive_schema_is_a_one_line_400(engine, schema):
    with _serve(engine) as url:
        r = httpx.post(
            f"{url}/v1/chat/completions",
            timeout=120,
            json={
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 4,
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
            },
        )
        assert r.status_code == 400, r.text
        message = r.json()["error"]["message"]
        assert message.startswith("json_schema is recursive: $ref '#") and "\n" not in message and len(message) < 250


def test_a_schema_with_plain_refs_still_works(engine):
    schema = {
        "$defs": {"name": {"type": "string", "maxLength": 8}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/name"}, "b": {"$ref": "#/$defs/name"}},
        "required": ["a"],
    }
    with _serve(engine) as url:
        r = httpx.post(
            f"{url}/v1/chat/completions",
            timeout=300,
            json={
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 24,
                "temperature": 0,
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
            },
        )
        assert r.status_code == 200, r.text


def _serve_cli(*args: str, env_key: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MEMLOOP_API_KEY"}
    env["PYTHONPATH"] = str(ROOT)
    if env_key:
        env["MEMLOOP_API_KEY"] = env_key
    return subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "serve", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_the_api_key_is_never_taken_from_the_command_line(tmp_path):
    proc = _serve_cli("--api-key", "s3cret", "--host", "0.0.0.0")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: ServerConfigError: --api-key puts the key on the command line, where `ps` shows it to every user "
        "of this machine: set MEMLOOP_API_KEY or pass --api-key-file FILE instead"
    )
    empty = tmp_path / "key"
    empty.write_text("")
    proc = _serve_cli("--api-key-file", str(empty), "--host", "0.0.0.0")
    assert proc.returncode == 2 and f"--api-key-file {empty} is empty" in proc.stderr
    help_text = _serve_cli("--help").stdout
    assert "MEMLOOP_API_KEY" in help_text and "--api-key-file" in help_text and "--api-key " not in help_text


def test_the_key_file_and_the_environment_give_the_key(tmp_path, monkeypatch):
    from memloop.jobs.commands.serve import read_api_key

    key = tmp_path / "key"
    key.write_text("s3cret\n")
    assert read_api_key(None, key) == "s3cret"
    monkeypatch.setenv("MEMLOOP_API_KEY", "from-env")
    assert read_api_key(None, None) == "from-env"
