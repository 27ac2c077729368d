"""The OpenAI-compatible client over real HTTP on 127.0.0.1 (a small OpenAI-style peer served by uvicorn)."""

from __future__ import annotations

import time

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from memloop.eval.llm import LLM, LLMRequest
from memloop.eval.llm_http import LLMHTTPError, OpenAICompatibleLLM

from memloop.sampling import SamplingParams
from tests.http_server import serve_app

SEEN: list[dict] = []
FLAKY = {"left": 1}
LIMITED = {"left": 1, "at": []}
IN_FLIGHT = {"now": 0, "max": 0}


def _app() -> FastAPI:
    app = FastAPI()

    def usage() -> dict:
        return {"prompt_tokens": 11, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        SEEN.append(body)
        if body["model"] == "bad":
            return JSONResponse({"error": {"message": "model 'bad' does not exist"}}, status_code=404)
        if body["model"] == "flaky" and FLAKY["left"] > 0:
            FLAKY["left"] -= 1
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        if body["model"] == "limited":
            LIMITED["at"].append(time.monotonic())
            if LIMITED["left"] > 0:
                LIMITED["left"] -= 1
                return JSONResponse(
                    {"error": {"message": "rate limited"}}, status_code=429, headers={"Retry-After": "1"}
                )
        if body["model"] == "quota":
            return JSONResponse({"error": {"message": "quota"}}, status_code=429, headers={"Retry-After": "3600"})
        if body["model"] == "slow":
            IN_FLIGHT["now"] += 1
            IN_FLIGHT["max"] = max(IN_FLIGHT["max"], IN_FLIGHT["now"])
            import asyncio

            await asyncio.sleep(0.2)
            IN_FLIGHT["now"] -= 1
        text = '{"a": 1}' if "response_format" in body else "hello " + body["messages"][-1]["content"]
        return {
            "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
            "usage": usage(),
        }

    @app.post("/v1/completions")
    async def completions(body: dict):
        SEEN.append(body)
        return {
            "choices": [{"text": " [EOQ]", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2},
        }

    return app


@pytest.fixture(scope="module")
def base_url():
    with serve_app(_app()) as url:
        yield url


def test_chat_with_schema_and_usage(base_url: str) -> None:
    llm = OpenAICompatibleLLM(base_url, "m", backoff_s=0.01)
    assert isinstance(llm, LLM)
    req = LLMRequest(
        messages=({"role": "user", "content": "hi"},),
        sampling=SamplingParams(max_tokens=7, top_k=40, seed=3, stop=("\n",)),
        json_schema={"type": "object"},
    )
    res = llm.complete(req)
    body = SEEN[-1]
    assert body["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert (body["max_tokens"], body["top_k"], body["seed"], body["stop"]) == (7, 40, 3, ["\n"])
    assert res.text == '{"a": 1}' and res.finish_reason == "length"
    assert (res.usage.prompt_tokens, res.usage.cached_tokens, res.usage.decoded_tokens) == (11, 8, 3)
    assert llm.count_tokens("hello world") == 2


def test_completion_prompt(base_url: str) -> None:
    res = OpenAICompatibleLLM(base_url + "/v1", "m").complete(LLMRequest(prompt="Q1:"))
    assert SEEN[-1]["prompt"] == "Q1:" and res.text == " [EOQ]" and res.usage.cached_tokens == 0


def test_retries_transient_and_reports_client_errors(base_url: str) -> None:
    res = OpenAICompatibleLLM(base_url, "flaky", backoff_s=0.01).complete(
        LLMRequest(prompt=None, messages=({"role": "user", "content": "x"},))
    )
    assert res.text == "hello x"
    with pytest.raises(LLMHTTPError, match="404: model 'bad' does not exist"):
        OpenAICompatibleLLM(base_url, "bad").complete(LLMRequest(messages=({"role": "user", "content": "x"},)))
    with pytest.raises(LLMHTTPError, match="cannot reach"):
        OpenAICompatibleLLM("http://127.0.0.1:9", "m", max_retries=1, backoff_s=0.01).complete(LLMRequest(prompt="x"))
    with pytest.raises(LLMHTTPError, match="MEMLOOP_TEST_NO_SUCH_KEY"):
        OpenAICompatibleLLM(base_url, "m", api_key_env="MEMLOOP_TEST_NO_SUCH_KEY")


def test_retry_after_is_honoured_and_a_long_wait_fails_fast(base_url) -> None:
    llm = OpenAICompatibleLLM(base_url, "limited", backoff_s=0.01)
    assert llm.complete(LLMRequest(messages=({"role": "user", "content": "x"},))).text.startswith("hello")
    first, second = LIMITED["at"][-2:]
    assert second - first >= 0.9  # waited the second the server asked for, not the 0.01 s backoff
    quota = OpenAICompatibleLLM(base_url, "quota", backoff_s=0.01)
    asked = sum(b["model"] == "quota" for b in SEEN)
    with pytest.raises(LLMHTTPError, match="retry after 3600 s") as info:  # (waiting the hour would time out)
        quota.complete(LLMRequest(messages=({"role": "user", "content": "x"},)))
    assert info.value.transient and sum(b["model"] == "quota" for b in SEEN) == asked + 1  # asked once, no retry
    with pytest.raises(LLMHTTPError) as bad:
        OpenAICompatibleLLM(base_url, "bad").complete(LLMRequest(messages=({"role": "user", "content": "x"},)))
    assert bad.value.transient is False  # a refused request is not worth another attempt


def test_concurrency_is_bounded_whatever_the_thread_count(base_url) -> None:
    from memloop.eval.llm import complete_many

    llm = OpenAICompatibleLLM(base_url, "slow", max_concurrency=2)
    reqs = [LLMRequest(messages=({"role": "user", "content": str(i)},)) for i in range(8)]
    assert len(complete_many(llm, reqs, max_workers=8)) == 8
    assert IN_FLIGHT["max"] == 2
