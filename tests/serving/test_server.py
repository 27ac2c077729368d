"""The OpenAI-compatible server on 127.0.0.1, hit with httpx."""

from __future__ import annotations

import json
import socket
import time

import httpx
import jsonschema
import pytest

from tests.http_server import serve_app

pytestmark = pytest.mark.timeout(600)

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "sunny": {"type": "boolean"}},
    "required": ["city", "sunny"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def base_url(engine):
    from memloop.engine.serve.server import create_app

    with serve_app(create_app(engine, "smollm2", max_body_bytes=64 * 1024)) as url:
        yield url


def test_models_completions_and_chat(base_url):
    with httpx.Client(base_url=base_url, timeout=300) as c:
        assert c.get("/v1/models").json()["data"][0]["id"] == "smollm2"
        body = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
        first = c.post("/v1/completions", json=body).json()
        again = c.post("/v1/completions", json=body).json()
        assert first["choices"][0]["text"] == again["choices"][0]["text"]
        u = again["usage"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        assert "cached_tokens" in u["prompt_tokens_details"]
        chat = c.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "Weather in Paris today, as JSON."}],
                "max_tokens": 64,
                "temperature": 0,
                "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}},
            },
        )
        assert chat.status_code == 200, chat.text
        msg = chat.json()["choices"][0]["message"]["content"]
        jsonschema.validate(json.loads(msg), SCHEMA)
        assert chat.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0


def test_bad_requests_get_4xx_and_the_server_stays_up(base_url):
    with httpx.Client(base_url=base_url, timeout=300) as c:
        bad = [
            c.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"}),
            c.post("/v1/chat/completions", json={"max_tokens": 4}),
            c.post("/v1/chat/completions", json={"messages": [{"role": "wizard", "content": "x"}]}),
            c.post("/v1/completions", json={"prompt": "x", "max_tokens": -3}),
            c.post("/v1/completions", json={"prompt": "x", "stream": "yes"}),
            c.post("/v1/completions", json={"prompt": "word " * 9000, "max_tokens": 4}),  # over the context
            c.post(
                "/v1/chat/completions",
                json={
                    "messages": [{"role": "user", "content": "x"}],
                    "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 5}}},
                },
            ),
        ]
        bad.append(
            c.post(
                "/v1/completions",
                content=b'{"prompt": "x", "max_tokens": 1' + b"0" * 5000 + b"}",
                headers={"content-type": "application/json"},
            )
        )  # an integer Python will not parse
        for r in bad:
            assert r.status_code == 400, r.text
            assert r.json()["error"]["message"]
        unknown = c.post("/v1/completions", json={"prompt": "x", "model": "gpt-17"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
        missing = c.get("/v2/nothing")
        assert missing.status_code == 404 and missing.json()["error"]["message"] == "Not Found"
        huge = c.post("/v1/completions", json={"prompt": "y" * 100_000, "max_tokens": 4})
        assert huge.status_code == 413
        assert c.get("/health").json() == {"ok": True}
        ok = c.post("/v1/completions", json={"prompt": "One, two,", "max_tokens": 3, "temperature": 0})
        assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("stop", "length")


@pytest.mark.slow
def test_memloop_serve_command(tmp_path):
    """`memloop serve --port P` in its own process, as a user starts it, with the key in the environment."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    memloop = Path(sys.executable).with_name("memloop")
    env = {**os.environ, "MEMLOOP_API_KEY": "k3y", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [str(memloop), "serve", "--port", str(port), "--kv-budget", str(64 << 20)],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "serve.log", "w"),
        env=env,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()["ok"]:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)  # not listening yet, or warming up
        # it said it was loading, then that it is ready, on stderr (a minute of silence reads as a hang)
        said = (tmp_path / "serve.log").read_text()
        assert "memloop serve: loading the model" in said, said[-2000:]
        ready = f"memloop serve: ready: 'SmolLM2-135M-Instruct.Q4_1' on http://127.0.0.1:{port}/v1"
        listening = f"memloop serve: listening on http://127.0.0.1:{port}/v1; warming up"
        assert ready in said and listening in said, said[-2000:]
        assert said.index("loading the model") < said.index(listening) < said.index(ready), said[-2000:]
        body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0}
        assert httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body).status_code == 401
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            timeout=300,
            json=body,
            headers={"Authorization": "Bearer k3y"},
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
