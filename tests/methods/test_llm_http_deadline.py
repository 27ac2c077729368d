"""The OpenAI-compatible client's whole-request deadline and response-size bound (issue #58, point
2), against real servers on 127.0.0.1: endpoints that drip the body or the headers a byte at a time
(httpx's per-read timeout never fires on them: an attempt used to last as long as the drip), and
endpoints that answer far more bytes than a completion has (read whole, 50 MB took the driver to
4.4 GB)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from memloop.eval import llm_http
from memloop.eval.llm import LLMRequest
from memloop.eval.llm_http import LLMHTTPError, OpenAICompatibleLLM

from tests.http_server import serve_app, serve_socket

pytestmark = pytest.mark.timeout(180)

DRIP_S = 30.0  # how long the dripping endpoints keep going: far past the 1 s timeout_s of these tests
BIG = 64 * 1024 * 1024  # the oversized answer: bytes, in 64 KiB chunks
ANSWER = {
    "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
}


def _app() -> FastAPI:
    app = FastAPI()

    @app.post("/drip/v1/chat/completions")
    async def drip(body: dict):
        async def body_bytes():  # 200 at once, then JSON whitespace a byte every 0.1 s, then a valid answer
            for _ in range(int(DRIP_S / 0.1)):
                yield b" "
                await asyncio.sleep(0.1)
            yield json.dumps(ANSWER).encode()

        return StreamingResponse(body_bytes(), media_type="application/json")

    @app.post("/slow/v1/chat/completions")
    async def slow(body: dict):  # slow but within a 5 s timeout_s: still answered
        await asyncio.sleep(0.5)
        return ANSWER

    @app.post("/declared/v1/chat/completions")
    async def declared(body: dict):  # 9 MB with its Content-Length
        return JSONResponse({**ANSWER, "padding": "x" * (9 * 1024 * 1024)})

    return app


@pytest.fixture(scope="module")
def base_url():
    with serve_app(_app()) as url:
        yield url


def _ask(llm: OpenAICompatibleLLM) -> str:
    return llm.complete(LLMRequest(messages=({"role": "user", "content": "hi"},))).text


def test_an_endpoint_dripping_its_body_is_cut_at_timeout_s(base_url):
    llm = OpenAICompatibleLLM(f"{base_url}/drip", "m", timeout_s=1, max_retries=0)
    # the drip never stalls a read, so only the whole request's deadline ends it (else it answers after DRIP_S)
    with pytest.raises(LLMHTTPError, match=r"did not answer within timeout_s=1 s \(the whole request") as info:
        _ask(llm)
    assert isinstance(info.value, llm_http.EndpointTimeoutError) and info.value.transient
    assert "gave up after 1 attempts" in str(info.value)


def test_each_retry_of_a_dripping_endpoint_gets_its_own_deadline(base_url):
    llm = OpenAICompatibleLLM(f"{base_url}/drip", "m", timeout_s=1, max_retries=2, backoff_s=0.01)
    with pytest.raises(llm_http.EndpointTimeoutError, match="gave up after 3 attempts"):
        _ask(llm)


def test_an_endpoint_dripping_its_headers_is_cut_at_timeout_s():
    def drip_headers(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
        for _ in range(int(DRIP_S / 0.1)):
            conn.sendall(b"a")
            time.sleep(0.1)

    with serve_socket(drip_headers) as url:
        llm = OpenAICompatibleLLM(url, "m", timeout_s=1, max_retries=0)
        with pytest.raises(LLMHTTPError, match="did not answer within timeout_s=1 s"):  # (the drip never ends)
            _ask(llm)


def test_a_slow_answer_within_timeout_s_is_read(base_url):
    assert _ask(OpenAICompatibleLLM(f"{base_url}/slow", "m", timeout_s=5, max_retries=0)) == "hi"


def test_an_oversized_answer_stops_at_the_bound():
    """64 MB with no Content-Length (the body ends when the connection closes) and valid JSON at the
    end: read whole, it was a completion; now reading stops past 8 MiB and the connection is closed."""
    sent = {"bytes": 0}

    def endless(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        conn.sendall(b'{"choices": [{"finish_reason": "stop", "message": {"content": "')
        for _ in range(BIG // 65536):
            conn.sendall(b"x" * 65536)  # blocks while the client does not read; fails once it hangs up
            sent["bytes"] += 65536
        conn.sendall(b'"}}]}')

    with serve_socket(endless) as url:
        with pytest.raises(LLMHTTPError, match=r"more than 8388608 bytes \(max_response_bytes\)") as info:
            _ask(OpenAICompatibleLLM(url, "m", max_retries=0))
    assert isinstance(info.value, llm_http.ResponseTooLargeError) and info.value.transient
    assert sent["bytes"] < BIG // 2  # the client stopped reading: the rest never left the server


def test_an_oversized_declared_answer_is_refused_before_reading(base_url):
    llm = OpenAICompatibleLLM(f"{base_url}/declared", "m", max_retries=1, backoff_s=0.01)
    with pytest.raises(llm_http.ResponseTooLargeError, match=r"Content-Length \d+\) \(gave up after 2 attempts"):
        _ask(llm)
    # the bound is the client's to choose
    big_enough = OpenAICompatibleLLM(f"{base_url}/declared", "m", max_response_bytes=16 * 1024 * 1024)
    assert _ask(big_enough) == "hi"


def test_the_bounds_survive_pickling(base_url):
    import pickle

    llm = pickle.loads(pickle.dumps(OpenAICompatibleLLM(f"{base_url}/slow", "m", timeout_s=7, max_response_bytes=1000)))
    assert (llm.timeout_s, llm.max_response_bytes) == (7, 1000)
