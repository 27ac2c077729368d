"""An OpenAI-compatible HTTP API over one `Engine` (FastAPI + uvicorn).

Routes: `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions` (with
`response_format` `json_schema` or `json_object` for constrained output), `GET /health`,
`GET /v1/stats`. Usage carries `prompt_tokens_details.cached_tokens` (prompt tokens served from
the prefix cache). Extensions beyond OpenAI's fields: `top_k`, `stop_token_ids`. Log-probabilities
of the output tokens come in OpenAI's shapes (`logprobs: N` on completions, `logprobs: true` +
`top_logprobs: N` on chat; N at most `MAX_LOGPROBS`), from the model's raw logits. `echo: true` on
completions returns the prompt before the completion, and with `logprobs` every prompt token's
log-probability (the first one's null, as OpenAI's): computed by the engine's prompt scoring
(`Engine.score`), a full-prompt forward apart from generation; `max_tokens: 0` then generates
nothing (how lm-evaluation-harness scores loglikelihood tasks). A completions `prompt` may be text
or token ids (one list of ints, or a list of them), as OpenAI's.

One bad request never harms another: every sampling field goes through the engine's one parser
(`SamplingParams.from_request`) before anything is queued; the body limit is enforced while the
body streams in; tokenising runs off the event loop (so `/health` stays fast); the queue is bounded
(429 + Retry-After), and a request that could never be admitted (more choices than the queue
holds) is a 400; a request whose client disconnects or that runs past the timeout is cancelled in
the engine. With an API key, every route but `/health` needs `Authorization: Bearer KEY`.

Hostile clients: a connection that does not finish its request headers within `HEADER_TIMEOUT_S`
is closed (`GuardedH11Protocol`), a body that does not arrive within `BODY_TIMEOUT_S` gets 408; a
server on loopback answers only loopback `Host` names (and those given with `allowed_hosts`), so a
web page cannot reach it through DNS rebinding; text with a lone UTF-16 surrogate is a 400; the
OpenAI fields memloop does not implement (`UNSUPPORTED_FIELDS`) are refused with a 400 naming the
field instead of being ignored.
"""
from __future__ import annotations

from abc import abstractmethod

import asyncio
import hmac
import ipaddress
import threading
import time
import uuid
from concurrent.futures import Future
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator
from starlette.exceptions import HTTPException

from engine.errors import EngineError, NonFiniteLogitsError, RequestError, ServerConfigError
from engine.sample.sampling import MAX_LOGPROBS, SamplingParams

MAX_BODY_BYTES = 8 * 1024 * 1024
HEADER_TIMEOUT_S = 10.0  # from connecting to the end of the request headers (slowloris)
BODY_TIMEOUT_S = 30.0  # from the end of the headers to the end of the body
MAX_N = 64
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

# OpenAI fields memloop does not implement, and the value that asks for nothing (also accepted):
# a client relying on one of them gets a 400 naming it, never an answer that silently ignores it.
UNSUPPORTED_FIELDS: dict[str, tuple[Any, ...]] = {
    "echo": (None, False), "best_of": (None, 1),
    "logit_bias": (None, {}), "tools": (None, []), "tool_choice": (None, "none", "auto"), "functions": (None, []),
    "function_call": (None, "none", "auto"), "suffix": (None, ""), "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
}
# Why a refused field is refused, where the reason is more than "not implemented".
UNSUPPORTED_WHY = {  # (completions declare `echo` as their own field, so only chat refuses it)
    "echo": "it is a /v1/completions field (the prompt, and with `logprobs` its tokens' log-probabilities, before "
            "the completion); send the text as a completion `prompt` to have it echoed",
}
# A log-probability too small for float32 would be -inf, which JSON cannot carry (vLLM's stand-in).
MIN_LOGPROB = -9999.0
DEFAULT_MAX_QUEUE = 256  # engine requests (choices) in flight at once through one server
RETRY_AFTER_S = 1
POLL_S = 0.2  # how often a waiting request looks for a client disconnect or its deadline


def _no_lone_surrogate(value: Any) -> Any:
    """Text must be valid Unicode: JSON can carry a lone UTF-16 surrogate (\\ud800) that no tokenizer
    can encode."""
    texts = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    for text in texts:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"holds a lone UTF-16 surrogate ({text[exc.start]!r} at character {exc.start}); "
                                 "send valid Unicode text") from None
    return value


class _Sampling(BaseModel):
    """The OpenAI sampling fields, passed through untouched: the engine's parser checks them."""

    model_config = ConfigDict(extra="allow")  # extra fields are looked at by `unsupported`

    model: str | None = None
    max_tokens: Any = None
    temperature: Any = None
    top_p: Any = None
    top_k: Any = None
    seed: Any = None
    stop: Any = None
    stop_token_ids: Any = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: bool = False
    logprobs: Any = None
    top_logprobs: Any = None

    _stop_text = field_validator("stop")(_no_lone_surrogate)

    def unsupported(self) -> str | None:
        """The first field asking for something memloop does not implement (see UNSUPPORTED_FIELDS)."""
        extra = self.model_extra or {}
        for name, inert in UNSUPPORTED_FIELDS.items():
            if name in extra and not any(extra[name] is v or (type(extra[name]) is type(v) and extra[name] == v)
                                         for v in inert):
                return name
        return None

    @abstractmethod
    def logprob_count(self) -> int | None:
        """Alternatives asked per output token (None: no log-probabilities); each endpoint reads its own fields."""

    def sampling(self, index: int) -> dict[str, Any]:
        seed = self.seed
        if index and isinstance(seed, int) and not isinstance(seed, bool):
            seed += index  # n samples of one seed differ
        temperature = 1.0 if self.temperature is None else self.temperature  # OpenAI's default
        return {"max_tokens": self.max_tokens, "temperature": temperature, "top_k": self.top_k,
                "top_p": self.top_p, "seed": seed, "stop": self.stop, "stop_token_ids": self.stop_token_ids,
                "logprobs": self.logprob_count()}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_LOGPROBS


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[StrictInt] | list[list[StrictInt]]  # text, or token ids (used as they are)
    echo: Any = None

    _prompt_text = field_validator("prompt")(_no_lone_surrogate)

    def prompts(self) -> list[str | list[int]]:
        one = isinstance(self.prompt, str) or bool(self.prompt) and isinstance(self.prompt[0], int)
        return [self.prompt] if one else list(self.prompt)  # type: ignore[list-item]

    def echoed(self) -> bool:
        if not isinstance(self.echo, (bool, type(None))):
            raise RequestError(f"`echo` must be true or false, got {_shown(self.echo)}")
        return bool(self.echo)

    def generates(self) -> bool:
        """False for `max_tokens: 0` with `echo` (score the prompt, generate nothing); 0 without echo is
        the sampling parser's 400."""
        return not (self.echoed() and type(self.max_tokens) is int and self.max_tokens == 0)

    def logprob_count(self) -> int | None:
        """OpenAI's completions `logprobs`: an integer N, the alternatives per token (0: the chosen token's only)."""
        if self.top_logprobs not in (None, 0) or isinstance(self.top_logprobs, bool):
            raise RequestError("`top_logprobs` is a chat completions field; on /v1/completions send "
                               f"`logprobs: N` (0 to {MAX_LOGPROBS}) for the N most likely tokens at each position")
        if self.logprobs is None or self.logprobs is False:
            return None
        if not _count(self.logprobs):
            raise RequestError(f"`logprobs` on /v1/completions must be an integer from 0 to {MAX_LOGPROBS} (the "
                               f"most likely tokens returned per position), got {_shown(self.logprobs)}")
        return self.logprobs


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str

    _content_text = field_validator("content")(_no_lone_surrogate)


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    response_format: ResponseFormat | None = None

    def logprob_count(self) -> int | None:
        """OpenAI's chat `logprobs: true` with `top_logprobs: N` (0 to MAX_LOGPROBS, default 0)."""
        if not isinstance(self.logprobs, (bool, type(None))):
            raise RequestError(f"`logprobs` on /v1/chat/completions must be true or false, got "
                               f"{_shown(self.logprobs)}; send `top_logprobs: N` for the N most likely tokens")
        if self.top_logprobs is not None and not _count(self.top_logprobs):
            raise RequestError(f"`top_logprobs` must be an integer from 0 to {MAX_LOGPROBS}, got "
                               f"{_shown(self.top_logprobs)}")
        if not self.logprobs:
            if self.top_logprobs:
                raise RequestError("`top_logprobs` needs `logprobs: true`; send both to get the most likely tokens")
            return None
        return self.top_logprobs or 0

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


class _QueueFull(Exception):
    pass


class _Timeout(Exception):
    pass


class _ClientGone(Exception):
    pass


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _lp(value: float | None) -> float | None:
    return None if value is None else max(value, MIN_LOGPROB)


def completion_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI's completions shape: parallel lists, and per position a {token: logprob} of the asked-for
    most likely tokens plus the chosen one (so up to N + 1 keys). An echoed prompt's first token has
    nothing before it: its logprob and top_logprobs are null."""
    tops: list[dict[str, float] | None] = []
    for e in entries:
        if e["top_logprobs"] is None:
            tops.append(None)
            continue
        top = {t["token"]: _lp(t["logprob"]) for t in reversed(e["top_logprobs"])}  # a shared text keeps the likelier
        top.setdefault(e["token"], _lp(e["logprob"]))
        tops.append(dict(sorted(top.items(), key=lambda kv: -kv[1])))
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [_lp(e["logprob"]) for e in entries],
            "top_logprobs": tops, "text_offset": [e["text_offset"] for e in entries]}


def echo_choice(prompt: dict[str, Any], result: dict[str, Any] | None, logprobs: bool) -> dict[str, Any]:
    """A completions choice with the prompt echoed before the completion (`result` None: nothing was
    generated): text = prompt + completion, and with `logprobs` the prompt's scored tokens followed
    by the completion's, whose offsets move past the prompt text."""
    text = prompt["text"] + (result["text"] if result else "")
    entries = None
    if logprobs:
        shift = len(prompt["text"])
        entries = [*prompt["entries"], *({**e, "text_offset": e["text_offset"] + shift}
                                         for e in (result["logprobs"] if result else []))]
    return {"text": text, "finish_reason": result["finish_reason"] if result else "length",
            "logprobs": completion_logprobs(entries) if entries is not None else None}


def chat_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI's chat shape: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}."""
    def one(e: dict[str, Any]) -> dict[str, Any]:
        return {"token": e["token"], "logprob": _lp(e["logprob"]), "bytes": e["bytes"]}

    return {"content": [{**one(e), "top_logprobs": [one(t) for t in e["top_logprobs"]]} for e in entries]}


def _error(status: int, message: str, kind: str = "invalid_request_error",
           headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind}}, headers=headers)


def _usage(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Engine usage summed over the choices (n samples each count their prompt, most of it cached)."""
    prompt = sum(r["usage"]["prompt_tokens"] for r in results)
    cached = sum(r["usage"]["cached_tokens"] for r in results)
    decoded = sum(r["usage"]["decoded_tokens"] for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": decoded, "total_tokens": prompt + decoded,
            "prompt_tokens_details": {"cached_tokens": cached}}


class Guard:
    """ASGI middleware in front of every route: the Host header, the API key, then the body limit.

    The body is read here, chunk by chunk, and buffered only up to `max_body_bytes`: an upload over
    the limit (with or without Content-Length, chunked included) gets 413 as soon as it crosses the
    limit, and a body that takes longer than `body_timeout_s` gets 408; the app behind never sees
    either. The buffered body is then replayed to the app; later `receive` calls go to the server,
    so the app still learns of a client disconnect. With `allowed_hosts`, a request whose `Host`
    names another host gets 400 before anything else (DNS rebinding: a page on evil.example that
    resolves its own name to 127.0.0.1 sends `Host: evil.example`).
    """

    def __init__(self, app: Any, max_body_bytes: int, api_key: str | None,
                 allowed_hosts: tuple[str, ...] | None = None, body_timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.api_key = api_key.encode() if api_key else None
        self.allowed_hosts = None if allowed_hosts is None else {h.lower().strip("[]") for h in allowed_hosts}
        self.body_timeout_s = body_timeout_s

    def host_allowed(self, header: bytes | None) -> bool:
        if self.allowed_hosts is None:
            return True
        host = (header or b"").decode("latin-1").strip().lower()
        name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] if host.count(":") == 1 \
            else host
        return name in self.allowed_hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if not self.host_allowed(headers.get(b"host")):
            shown = (headers.get(b"host") or b"").decode("latin-1")[:100]
            return await _error(400, f"Host header {shown!r} is not a name this server answers to (it answers to "
                                     f"{', '.join(sorted(self.allowed_hosts or ()))}); a web page may be trying DNS "
                                     "rebinding. Start the server with --allow-host NAME to accept that name")(
                scope, receive, send)
        if self.api_key is not None and scope.get("path") != "/health":
            auth = headers.get(b"authorization", b"")
            if not hmac.compare_digest(auth, b"Bearer " + self.api_key):
                return await _error(401, "missing or wrong API key: send the header `Authorization: Bearer KEY` "
                                         "with the key the server was started with", "authentication_error",
                                    {"WWW-Authenticate": "Bearer"})(scope, receive, send)
        too_big = _error(413, f"request body over {self.max_body_bytes} bytes; send a shorter prompt")
        size = headers.get(b"content-length")
        if size is not None and (not size.isdigit() or int(size) > self.max_body_bytes):
            return await too_big(scope, receive, send)
        chunks, total, more = [], 0, True
        deadline = time.monotonic() + self.body_timeout_s
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                return await _error(408, f"the request body did not arrive within {self.body_timeout_s:g} s; send "
                                         "the whole body at once", headers={"Connection": "close"})(
                    scope, receive, send)
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_body_bytes:
                return await too_big(scope, receive, send)
            chunks.append(body)
            more = message.get("more_body", False)
        replay: list[dict[str, Any]] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def receive_replayed() -> dict[str, Any]:
            return replay.pop() if replay else await receive()

        await self.app(scope, receive_replayed, send)


def guarded_protocol(header_timeout_s: float = HEADER_TIMEOUT_S) -> type:
    """uvicorn's h11 protocol, closing a connection whose request headers are not complete within
    `header_timeout_s` of connecting (or of the previous response): half-sent requests, sent by
    accident or to hold connections open, cannot pile up. The body's bound is `Guard`'s."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _header_timer: Any = None

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.cycle is None or self.cycle.response_complete:  # still waiting for a request's headers
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a request's headers arrived: its body is Guard's to bound
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request on a kept-alive connection

    return GuardedH11Protocol


def create_app(engine: Any, model_name: str = "memloop", max_body_bytes: int = MAX_BODY_BYTES, *,
               api_key: str | None = None, max_queue: int = DEFAULT_MAX_QUEUE,
               request_timeout: float | None = None, allowed_hosts: tuple[str, ...] | None = None,
               body_timeout_s: float = BODY_TIMEOUT_S) -> FastAPI:
    """The API over a running `Engine` (anything with `submit(request) -> Future`, `cancel(future)`,
    `health()` and `stats()`).

    max_queue: engine requests (n choices each count) in flight at once; more get 429.
    request_timeout: seconds a request may take before it is cancelled with 504 (None: no limit).
    allowed_hosts: the `Host` names answered (None: any; `serve` gives the loopback names on loopback).
    """
    app = FastAPI(title="memloop engine", version="1")
    app.add_middleware(Guard, max_body_bytes=max_body_bytes, api_key=api_key, allowed_hosts=allowed_hosts,
                       body_timeout_s=body_timeout_s)
    in_flight = 0

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return _error(400, f"invalid request at {where or 'body'}: {first.get('msg', 'malformed')}")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:  # 404, 405, unparsable bodies
        message = str(exc.detail)
        if exc.status_code == 400:  # FastAPI could not parse the body at all
            message += "; send one JSON object (numbers of at most 4300 digits)"
        return _error(exc.status_code, message, headers=exc.headers)

    @app.exception_handler(RequestError)
    async def bad_request(_: Request, exc: RequestError) -> JSONResponse:
        return _error(400, str(exc))

    @app.exception_handler(EngineError)
    async def engine_failed(_: Request, exc: EngineError) -> JSONResponse:
        return _error(503, str(exc), "engine_error")

    @app.exception_handler(NonFiniteLogitsError)
    async def model_numbers_failed(_: Request, exc: NonFiniteLogitsError) -> JSONResponse:
        return _error(500, str(exc), "engine_error")  # the same again on a retry: not 503

    @app.exception_handler(_QueueFull)
    async def queue_full(_: Request, exc: _QueueFull) -> JSONResponse:
        return _error(429, str(exc), "rate_limit_error", {"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(_Timeout)
    async def timed_out(_: Request, exc: _Timeout) -> JSONResponse:
        return _error(504, str(exc), "timeout_error")

    @app.exception_handler(_ClientGone)
    async def client_gone(_: Request, exc: _ClientGone) -> JSONResponse:
        return _error(499, str(exc), "client_closed_request")  # nobody reads it; the log does

    def submit_all(requests: list[dict[str, Any]]) -> list[Future]:
        """Tokenise and queue (on a worker thread); the first invalid request cancels the rest."""
        futs: list[Future] = []
        for r in requests:
            fut = engine.submit(r)
            futs.append(fut)
            if fut.done() and fut.exception() is not None:
                for f in futs:
                    engine.cancel(f)
                raise fut.exception()
        return futs

    async def watched(http: Request, work: "asyncio.Future[Any]") -> Any:
        """`work`'s result, or _ClientGone / _Timeout as soon as the client leaves or the deadline passes
        (the caller then stops the work)."""
        work.add_done_callback(lambda g: g.cancelled() or g.exception())  # never "unretrieved"
        deadline = None if request_timeout is None else time.monotonic() + request_timeout
        while True:
            done, _ = await asyncio.wait({work}, timeout=POLL_S)
            if done:
                return work.result()
            if await http.is_disconnected():
                raise _ClientGone("the client disconnected; the request was cancelled")
            if deadline is not None and time.monotonic() > deadline:
                raise _Timeout(f"the request did not finish within {request_timeout:g} s (the server's "
                               "--request-timeout); lower max_tokens, send shorter prompts, or retry when the "
                               "server is less busy")

    async def wait(http: Request, futs: list[Future]) -> list[dict[str, Any]]:
        try:
            return await watched(http, asyncio.gather(*(asyncio.wrap_future(f) for f in futs)))
        finally:
            for f in futs:  # no-op for finished ones; frees the batch slots of the others
                engine.cancel(f)

    @asynccontextmanager
    async def admitted(count: int) -> AsyncIterator[None]:
        """Hold `count` of the server's `max_queue` places (engine requests or prompts scored) meanwhile."""
        nonlocal in_flight
        if count > max_queue:  # could never be admitted: retrying would loop forever
            raise RequestError(f"this request asks for {count} completions (prompts x n) but the server "
                               f"admits at most {max_queue} at once (--max-queue); lower n or send fewer prompts")
        if in_flight + count > max_queue:
            raise _QueueFull(f"the server is busy ({in_flight} requests in flight, --max-queue {max_queue}); "
                             f"retry after {RETRY_AFTER_S} s")
        in_flight += count
        try:
            yield
        finally:
            in_flight -= count

    async def run(http: Request, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for r in requests:  # every choice is checked before any is queued
            SamplingParams.from_request(r["sampling"])
        async with admitted(len(requests)):
            futs = await asyncio.to_thread(submit_all, requests)
            return await wait(http, futs)

    async def echoed_prompts(http: Request, prompts: list[str | list[int]], top_n: int | None) -> list[dict[str, Any]]:
        """Each prompt's {"ids", "text", "entries"}: scored by the engine when log-probabilities are asked
        (`Engine.score`, a forward over every prompt token), else only tokenised. Scoring is bounded
        like generation: past the timeout or once the client leaves, the request ends, its queue
        places are freed and the scorer starts no further call for it."""
        if top_n is None:
            return await asyncio.to_thread(lambda: [engine.prompt_text(p) for p in prompts])
        async with admitted(len(prompts)):
            stop = threading.Event()
            try:
                return await watched(http, asyncio.ensure_future(asyncio.to_thread(engine.score, prompts, top_n,
                                                                                   stop=stop)))
            finally:
                stop.set()

    def check(req: _Sampling) -> None:
        if req.stream:
            raise RequestError("stream=true is not supported; send stream=false")
        field = req.unsupported()
        if field is not None:
            why = f": {UNSUPPORTED_WHY[field]}" if field in UNSUPPORTED_WHY else ""
            raise RequestError(f"`{field}` is not supported by this server{why}; leave it out (or send its "
                               "default) — memloop serves text, JSON-constrained output, the output tokens' "
                               "log-probabilities and usage")
        req.logprob_count()  # a bad logprobs/top_logprobs is a 400 naming it, before anything is queued
        if req.model not in (None, model_name):
            raise RequestError(f"unknown model {req.model!r}; this server serves {model_name!r} (see /v1/models)")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": bool(engine.health())}

    @app.get("/v1/stats")
    async def stats() -> dict[str, Any]:
        return {**engine.stats(), "server_in_flight": in_flight, "server_max_queue": max_queue}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "memloop"}]}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, http: Request) -> dict[str, Any]:
        check(req)
        prompts = req.prompts()
        if not prompts or len(prompts) * req.n > MAX_N:
            raise RequestError(f"send 1 to {MAX_N} prompts x n per request")
        echo, top_n = req.echoed(), req.logprob_count()
        requests = [{"prompt": p, "sampling": req.sampling(i), "json_schema": None}
                    for p in prompts for i in range(req.n)]
        if req.generates():
            results: list[dict[str, Any] | None] = list(await run(http, requests))
        else:  # echo with max_tokens 0: the other sampling fields are still checked
            for r in requests:
                SamplingParams.from_request({**r["sampling"], "max_tokens": 1})
            results = [None] * len(requests)
        if echo:
            shown = await echoed_prompts(http, prompts, top_n)
            choices = [echo_choice(shown[i // req.n], r, top_n is not None) for i, r in enumerate(results)]
            usage = _usage([r or {"usage": {"prompt_tokens": len(shown[i // req.n]["ids"]), "cached_tokens": 0,
                                            "decoded_tokens": 0}} for i, r in enumerate(results)])
        else:
            choices = [{"text": r["text"], "finish_reason": r["finish_reason"],
                        "logprobs": completion_logprobs(r["logprobs"]) if "logprobs" in r else None}
                       for r in results if r is not None]
            usage = _usage(results)  # type: ignore[arg-type]
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": model_name, "choices": [{"index": i, **c} for i, c in enumerate(choices)], "usage": usage}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, http: Request) -> dict[str, Any]:
        check(req)
        schema = req.schema()
        messages = [m.model_dump() for m in req.messages]
        results = await run(http, [{"messages": messages, "sampling": req.sampling(i), "json_schema": schema}
                                   for i in range(req.n)])
        choices = [{"index": i, "message": {"role": "assistant", "content": r["text"]},
                    "finish_reason": r["finish_reason"],
                    "logprobs": chat_logprobs(r["logprobs"]) if "logprobs" in r else None}
                   for i, r in enumerate(results)]
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": model_name, "choices": choices, "usage": _usage(results)}

    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost may resolve to anything
        return False


def check_options(host: str, port: int, api_key: str | None, max_queue: int = DEFAULT_MAX_QUEUE,
                  request_timeout: float | None = None) -> None:
    """Refuse what cannot be served safely, before the model loads (ServerConfigError, one line)."""
    if not 1 <= port <= 65535:
        raise ServerConfigError(f"--port must be between 1 and 65535, got {port}")
    if not api_key and not is_loopback(host):
        raise ServerConfigError(f"--host {host} is reachable from other machines: set MEMLOOP_API_KEY (or pass "
                                "--api-key-file FILE), or bind to 127.0.0.1")
    if max_queue < 1:
        raise ServerConfigError(f"--max-queue must be at least 1, got {max_queue}")
    if request_timeout is not None and not request_timeout > 0:
        raise ServerConfigError(f"--request-timeout must be a positive number of seconds, got {request_timeout}")


def allowed_hosts_for(host: str, extra: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The `Host` names a server bound to `host` answers: on loopback, the loopback names and `extra`
    (DNS rebinding); elsewhere (an API key is required there) any."""
    if not is_loopback(host):
        return None
    return tuple(dict.fromkeys((*LOOPBACK_HOSTS, host, *extra)))


def uvicorn_config(app: Any, host: str, port: int, log_level: str = "info",
                   header_timeout_s: float = HEADER_TIMEOUT_S) -> Any:
    """uvicorn's config for the API: the header-timeout protocol, and no idle connection kept long."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=guarded_protocol(header_timeout_s),
                          timeout_keep_alive=5)


def serve(config: Any = None, host: str = "127.0.0.1", port: int = 8000, model_name: str | None = None, *,
          api_key: str | None = None, max_queue: int = DEFAULT_MAX_QUEUE, request_timeout: float | None = None,
          allow_hosts: tuple[str, ...] = ()) -> None:
    """Check the options, load the engine and serve until interrupted."""
    check_options(host, port, api_key, max_queue, request_timeout)
    import uvicorn

    from engine.engine_config import EngineConfig
    from engine.sched.serving import Engine

    engine = Engine(EngineConfig.of(config))
    name = model_name or engine.lm.path.stem
    app = create_app(engine, name, api_key=api_key or None, max_queue=max_queue, request_timeout=request_timeout,
                     allowed_hosts=allowed_hosts_for(host, allow_hosts))
    try:
        uvicorn.Server(uvicorn_config(app, host, port)).run()
    finally:
        engine.shutdown()
