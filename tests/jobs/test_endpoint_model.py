"""Methods on an OpenAI-compatible endpoint (`model: {kind: openai}`), and the response cache.

The endpoint is a real HTTP server on 127.0.0.1 (uvicorn) speaking the chat-completions subset the
client uses, answering a fixed summary with the usage a provider reports (cached tokens included).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.driver import execute
from memloop.jobs.run.plan import make_plan
from memloop.jobs.store.run_store import RunStore

from tests.http_server import serve_app

BOOK = Path(__file__).resolve().parents[2] / "jobs/configs/data/lighthouse-keeper.txt"
SEEN: list[dict] = []


def _app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        SEEN.append(body)
        return {
            "choices": [
                {
                    "message": {"role": "assistant", "content": "The keeper tends the light alone."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 300, "completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": 120}},
        }

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "peer-1", "object": "model"}]}

    return app


@pytest.fixture(scope="module")
def endpoint():
    with serve_app(_app()) as url:
        yield url


def _cfg(tmp_path: Path, endpoint: str, **over) -> dict:
    cfg = {
        "name": "ep",
        "output": str(tmp_path / "runs"),
        "response_cache": str(tmp_path / "cache"),
        "datasets": [{"task": "book", "path": str(BOOK), "options": {"chunk_tokens": 256, "max_chunks": 2}}],
        "methods": [{"name": "inc-update", "options": {"max_attempts": 1, "word_limit": 30}}],
        "model": {"kind": "openai", "endpoint": {"base_url": endpoint, "model": "peer-1", "max_concurrency": 2}},
        "judge_cpus": 0.25,
    }
    cfg.update(over)
    return cfg


def test_methods_run_on_an_endpoint_with_its_usage_and_a_response_cache(ray_local, tmp_path, endpoint) -> None:
    SEEN.clear()
    first = execute(make_plan(parse_config(_cfg(tmp_path, endpoint))), log=lambda m: None)
    assert (first.computed, first.failed) == (1, 0), first.errors
    calls = len(SEEN)
    assert calls >= 2 and all(b["model"] == "peer-1" for b in SEEN)
    assert SEEN[0]["max_tokens"] == 900  # the method's own default (its 900-token summary limit) reached the endpoint
    rs = RunStore.at(first.output)
    steps = rs.table("steps").to_pandas()
    assert (steps["prompt_tokens"] == 300).all() and (steps["cached_tokens"] == 120).all()  # exact usage
    assert first.stats["response_cache"] == {"hits": 0, "misses": calls}
    assert rs.table("runs").to_pandas().iloc[0]["model_digest"].startswith("endpoint:")
    # a fresh run of the same requests (new tag): every answer comes from the cache, nothing is re-paid
    second = execute(make_plan(parse_config(_cfg(tmp_path, endpoint, tag="again"))), log=lambda m: None)
    assert second.computed == 1 and len(SEEN) == calls
    assert second.stats["response_cache"] == {"hits": calls, "misses": 0}
    a = json.loads(rs.table("samples").to_pandas().iloc[0]["output_json"])["answer"]
    b = json.loads(RunStore.at(second.output).table("samples").to_pandas().iloc[0]["output_json"])["answer"]
    assert a == b == "The keeper tends the light alone."


def test_an_endpoint_model_must_name_its_endpoint(tmp_path) -> None:
    from memloop.jobs.errors import ConfigError

    with pytest.raises(ConfigError, match="needs `endpoint`"):
        parse_config(_cfg(tmp_path, "http://127.0.0.1:1", model={"kind": "openai"}))
    with pytest.raises(ConfigError, match="remove `weights`"):
        parse_config(
            _cfg(
                tmp_path,
                "x",
                model={"kind": "openai", "weights": "m.gguf", "endpoint": {"base_url": "http://x", "model": "m"}},
            )
        )


def test_an_endpoint_llm_pickles_into_another_process_with_its_settings(endpoint) -> None:
    """Judges run as Ray tasks and receive the run's LLM: an endpoint model must pickle (its HTTP
    client does not) and the copy must reach the same endpoint with the same settings."""
    import pickle

    from memloop.eval.llm import LLMRequest
    from memloop.eval.llm_http import OpenAICompatibleLLM

    llm = OpenAICompatibleLLM(endpoint, "peer-1", max_retries=1, supports_json_schema=False, max_concurrency=3)
    llm.complete(LLMRequest(messages=[{"role": "user", "content": "warm the client up"}]))  # a used client holds locks
    copy = pickle.loads(pickle.dumps(llm))
    assert (copy.base_url, copy.model, copy.max_retries, copy.supports_json_schema) == (
        llm.base_url,
        "peer-1",
        1,
        False,
    )
    assert (
        copy.complete(LLMRequest(messages=[{"role": "user", "content": "hello"}])).text
        == "The keeper tends the light alone."
    )
