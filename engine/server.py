"""An OpenAI-compatible HTTP API over one `Engine` (FastAPI + uvicorn).

Routes: `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions` (with
`response_format` `json_schema` or `json_object` for constrained output), `GET /health`,
`GET /v1/stats`. Usage carries `prompt_tokens_details.cached_tokens` (prompt tokens served from
the prefix cache). Bad requests get a 4xx with an OpenAI-style error body; the server stays up.
Extensions beyond OpenAI's fields: `top_k`.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from engine.errors import EngineError, RequestError

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_N = 64


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int = Field(default=0, ge=0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: bool = False

    def sampling(self, index: int) -> dict[str, Any]:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        seed = None if self.seed is None else self.seed + index  # n samples of one seed differ
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_k": self.top_k,
                "top_p": self.top_p, "seed": seed, "stop": stop}


class CompletionRequest(_Sampling):
    prompt: str | list[str]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    response_format: ResponseFormat | None = None

    def schema(self) -> dict[str, Any] | None:
        rf = self.response_format
        if rf is None or rf.type == "text":
            return None
        if rf.type == "json_object":
            return {"type": "object"}
        spec = rf.json_schema or {}
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise RequestError("response_format.json_schema.schema must be a JSON Schema object")
        return schema


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind}})


def _usage(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Engine usage summed over the choices (n samples each count their prompt, most of it cached)."""
    prompt = sum(r["usage"]["prompt_tokens"] for r in results)
    cached = sum(r["usage"]["cached_tokens"] for r in results)
    decoded = sum(r["usage"]["decoded_tokens"] for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": decoded, "total_tokens": prompt + decoded,
            "prompt_tokens_details": {"cached_tokens": cached}}


def create_app(engine: Any, model_name: str = "memloop", max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The API over a running `Engine` (anything with `submit(request) -> Future` and `stats()`)."""
    app = FastAPI(title="memloop engine", version="1")

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > max_body_bytes):
            return _error(413, f"request body over {max_body_bytes} bytes; send a shorter prompt")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return _error(400, f"invalid request at {where or 'body'}: {first.get('msg', 'malformed')}")

    @app.exception_handler(RequestError)
    async def bad_request(_: Request, exc: RequestError) -> JSONResponse:
        return _error(400, str(exc))

    @app.exception_handler(EngineError)
    async def engine_failed(_: Request, exc: EngineError) -> JSONResponse:
        return _error(503, str(exc), "engine_error")

    async def run(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        futs = [engine.submit(r) for r in requests]
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futs)))

    def check(req: _Sampling) -> None:
        if req.stream:
            raise RequestError("stream=true is not supported; send stream=false")
        if req.model not in (None, model_name):
            raise RequestError(f"unknown model {req.model!r}; this server serves {model_name!r} (see /v1/models)")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": bool(engine.health())}

    @app.get("/v1/stats")
    async def stats() -> dict[str, Any]:
        return engine.stats()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "memloop"}]}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> dict[str, Any]:
        check(req)
        prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        if not prompts or len(prompts) * req.n > MAX_N:
            raise RequestError(f"send 1 to {MAX_N} prompts x n per request")
        results = await run([{"prompt": p, "sampling": req.sampling(i), "json_schema": None}
                             for p in prompts for i in range(req.n)])
        choices = [{"index": i, "text": r["text"], "logprobs": None, "finish_reason": r["finish_reason"]}
                   for i, r in enumerate(results)]
        usage = _usage(results)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": model_name, "choices": choices, "usage": usage}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest) -> dict[str, Any]:
        check(req)
        schema = req.schema()
        messages = [m.model_dump() for m in req.messages]
        results = await run([{"messages": messages, "sampling": req.sampling(i), "json_schema": schema}
                             for i in range(req.n)])
        choices = [{"index": i, "message": {"role": "assistant", "content": r["text"]},
                    "finish_reason": r["finish_reason"], "logprobs": None} for i, r in enumerate(results)]
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": model_name, "choices": choices, "usage": _usage(results)}

    return app


def serve(config: Any = None, host: str = "127.0.0.1", port: int = 8000, model_name: str | None = None) -> None:
    """Load the engine and serve until interrupted."""
    import uvicorn

    from engine.actor import engine_config
    from engine.serving import Engine

    engine = Engine(engine_config(config))
    name = model_name or engine.lm.path.stem
    try:
        uvicorn.run(create_app(engine, name), host=host, port=port, log_level="info")
    finally:
        engine.shutdown()
