"""An OpenAI-compatible HTTP API over one `Engine` (FastAPI + uvicorn).

Routes: `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions` (with
`response_format` `json_schema` or `json_object` for constrained output), `POST /v1/responses` (the
Responses API for text, `responses_api.py`), `GET /health`,
`GET /v1/stats`. Usage carries `prompt_tokens_details.cached_tokens` (prompt tokens served from
the prefix cache). Extensions beyond OpenAI's fields: `top_k`, `stop_token_ids`. Log-probabilities
of the output tokens come in OpenAI's shapes (`logprobs: N` on completions, `logprobs: true` +
`top_logprobs: N` on chat; N at most `MAX_LOGPROBS`), from the model's raw logits. `echo: true` on
completions returns the prompt before the completion, and with `logprobs` every prompt token's
log-probability (the first one's null, as OpenAI's): computed by the engine's prompt scoring
(`Engine.score`), a full-prompt forward apart from generation; `max_tokens: 0` then generates
nothing (how lm-evaluation-harness scores loglikelihood tasks). A completions `prompt` may be text
or token ids (one list of ints, or a list of them), as OpenAI's. `stream: true` answers either route
with Server-Sent Events as OpenAI and vLLM do (`streaming.py`, `chunks.py`).

One bad request never harms another: every sampling field goes through the engine's one parser
(`memloop.engine.sample.sampling.request_params`) before anything is queued; the body limit is enforced while the
body streams in; tokenising runs off the event loop (so `/health` stays fast); the queue is bounded
(429 + Retry-After), and a request that could never be admitted (more choices than the queue
holds) is a 400; a request whose client disconnects or that runs past the timeout is cancelled in
the engine, its prompt scoring included, and the watch covers its whole life (queueing for a worker
thread too). `/health` answers 503 with the reason when the engine has had work and made no
progress for `stall_s` seconds, and 503 `"status": "warming up"` while a fresh `memloop serve` compiles the
step shapes of small requests (`RequestGate.warm_up`), when every request is refused at once with 503 and
Retry-After rather than left to wait behind the compiles. With an API key, every route but `/health` needs
`Authorization: Bearer KEY`.

Hostile clients: a connection that does not finish its request headers within `HEADER_TIMEOUT_S`
is closed (`GuardedH11Protocol`), a body that does not arrive within `BODY_TIMEOUT_S` gets 408; a
server on loopback answers only loopback `Host` names (and those given with `allowed_hosts`), so a
web page cannot reach it through DNS rebinding (the Host and key guards are the viewer's too:
`memloop.web_guard`); text with a lone UTF-16 surrogate is a 400; the
OpenAI fields memloop does not implement (`protocol.UNSUPPORTED_FIELDS`) and the fields a route does
not know are refused with a 400 naming the field instead of being ignored; an unknown model is a 404
`model_not_found`.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI
from memloop.engine.errors import ServerConfigError
from memloop.engine.serve.openai_serving import (
    DEFAULT_STALL_S,
    DEFAULT_WORKERS,
    RequestGate,
    ServingChat,
    ServingCompletion,
    ServingModels,
    ServingResponses,
    error_response,
    install_error_handlers,
)

from memloop.web_guard import HostGuard, KeyGuard, host_names, is_loopback

MAX_BODY_BYTES = 8 * 1024 * 1024
HEADER_TIMEOUT_S = 10.0  # from connecting to the end of the request headers (slowloris)
BODY_TIMEOUT_S = 30.0  # from the end of the headers to the end of the body

DEFAULT_MAX_QUEUE = 256  # engine requests (choices) in flight at once through one server


class BodyGuard:
    """ASGI middleware behind the Host and key guards (`memloop.web_guard`): the body limit and the body timeout.

    The body is read here, chunk by chunk, and buffered only up to `max_body_bytes`: an upload over
    the limit (with or without Content-Length, chunked included) gets 413 as soon as it crosses the
    limit, and a body that takes longer than `body_timeout_s` gets 408; the app behind never sees
    either. The buffered body is then replayed to the app; later `receive` calls go to the server,
    so the app still learns of a client disconnect.
    """

    def __init__(self, app: Any, max_body_bytes: int, body_timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        too_big = error_response(413, f"request body over {self.max_body_bytes} bytes; send a shorter prompt")
        size = headers.get(b"content-length")
        if size is not None and (not size.isdigit() or int(size) > self.max_body_bytes):
            return await too_big(scope, receive, send)
        chunks, total, more = [], 0, True
        deadline = time.monotonic() + self.body_timeout_s
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                return await error_response(
                    408,
                    f"the request body did not arrive within {self.body_timeout_s:g} s; send the whole body at once",
                    headers={"Connection": "close"},
                )(scope, receive, send)
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


def refuse_host(header: str, allowed: tuple[str, ...]) -> Any:
    """The API's answer to a Host header it does not answer to (`memloop.web_guard.HostGuard`)."""
    return error_response(
        400,
        f"Host header {header[:100]!r} is not a name this server answers to (it answers to "
        f"{', '.join(sorted(allowed))}); a web page may be trying DNS rebinding. Start the "
        "server with --allow-host NAME to accept that name",
    )


def refuse_key() -> Any:
    """The API's answer to a request without its key (`memloop.web_guard.KeyGuard`)."""
    return error_response(
        401,
        "missing or wrong API key: send the header `Authorization: Bearer KEY` with the key "
        "the server was started with",
        "authentication_error",
        {"WWW-Authenticate": "Bearer"},
    )


def guarded_protocol(header_timeout_s: float = HEADER_TIMEOUT_S) -> type:
    """uvicorn's h11 protocol, closing a connection whose request headers are not complete within
    `header_timeout_s` of connecting (or of the previous response): half-sent requests, sent by
    accident or to hold connections open, cannot pile up. The body's bound is `BodyGuard`'s.

    The one subclass of uvicorn's internals left: uvicorn has no public setting for it (`timeout_keep_alive`
    stops counting at the first byte of a request, and an ASGI middleware first runs once the headers are
    complete), so only the protocol object sees a connection that never finishes its headers."""
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
            if self.cycle is not cycle:  # a request's headers arrived: its body is BodyGuard's to bound
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request on a kept-alive connection

    return GuardedH11Protocol


def create_app(
    engine: Any,
    model_name: str = "memloop",
    max_body_bytes: int = MAX_BODY_BYTES,
    *,
    api_key: str | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    request_timeout: float | None = None,
    allowed_hosts: tuple[str, ...] | None = None,
    body_timeout_s: float = BODY_TIMEOUT_S,
    workers: int = DEFAULT_WORKERS,
    stall_s: float = DEFAULT_STALL_S,
    warmup_batch: int | None = None,
    on_warm: Callable[[], None] | None = None,
) -> FastAPI:
    """The API over a running `Engine` (see `RequestGate` for what it must have): the guard in front,
    then one serving class per route family (engine/serve/openai_serving.py) sharing one `RequestGate`.

    max_queue: engine requests (n choices each count) in flight at once; more get 429.
    request_timeout: seconds a request may take before it is cancelled with 504 (None: no limit).
    allowed_hosts: the `Host` names answered (None: any; `serve` gives the loopback names on loopback).
    workers: threads that tokenise and queue requests (the server's own, not asyncio's default pool).
    stall_s: seconds with work in hand and no progress after which /health answers 503.
    warmup_batch: at start, compile the step shapes of batches up to this size before admitting requests
    (`RequestGate.warm_up`; meanwhile /health says "warming up" and requests get 503 + Retry-After); None: none.
    """
    gate = RequestGate(engine, model_name, max_queue, request_timeout, workers, stall_s)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if warmup_batch is not None:
            gate.warm_up(warmup_batch, on_warm)
        try:
            yield
        finally:
            gate.close()  # the worker threads end with the server, not with the process

    app = FastAPI(title="memloop engine", version="1", lifespan=lifespan)
    # the last added runs first: the Host header, then the key (/health needs none), then the body
    app.add_middleware(BodyGuard, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s)
    if api_key:
        app.add_middleware(KeyGuard, key=api_key, refusal=refuse_key, open_paths=("/health",))
    if allowed_hosts is not None:
        app.add_middleware(HostGuard, allowed=allowed_hosts, refusal=refuse_host)
    install_error_handlers(app)
    models, completion, chat, responses = (
        ServingModels(gate),
        ServingCompletion(gate),
        ServingChat(gate),
        ServingResponses(gate),
    )
    app.get("/health")(models.health)
    app.get("/v1/stats")(models.stats)
    app.get("/v1/models")(models.models)
    app.post("/v1/completions", response_model=None)(completion.create)  # JSON, or an SSE stream
    app.post("/v1/chat/completions", response_model=None)(chat.create)
    app.post("/v1/responses", response_model=None)(responses.create)
    return app


def check_options(
    host: str,
    port: int,
    api_key: str | None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    request_timeout: float | None = None,
    stall_s: float = DEFAULT_STALL_S,
) -> None:
    """Refuse what cannot be served safely, before the model loads (ServerConfigError, one line)."""
    if not 1 <= port <= 65535:
        raise ServerConfigError(f"--port must be between 1 and 65535, got {port}")
    if not api_key and not is_loopback(host):
        raise ServerConfigError(
            f"--host {host} is reachable from other machines: set MEMLOOP_API_KEY (or pass "
            "--api-key-file FILE), or bind to 127.0.0.1"
        )
    if max_queue < 1:
        raise ServerConfigError(f"--max-queue must be at least 1, got {max_queue}")
    if request_timeout is not None and not request_timeout > 0:
        raise ServerConfigError(f"--request-timeout must be a positive number of seconds, got {request_timeout}")
    if not stall_s > 0:
        raise ServerConfigError(f"--stall-timeout must be a positive number of seconds, got {stall_s}")


def allowed_hosts_for(host: str, extra: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The `Host` names a server bound to `host` answers: on loopback, the loopback names, `host` and `extra`
    (DNS rebinding); elsewhere (an API key is required there) any."""
    return host_names(host, extra) if is_loopback(host) else None


def uvicorn_config(
    app: Any, host: str, port: int, log_level: str = "info", header_timeout_s: float = HEADER_TIMEOUT_S
) -> Any:
    """uvicorn's config for the API: the header-timeout protocol, and no idle connection kept long."""
    import uvicorn

    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, http=guarded_protocol(header_timeout_s), timeout_keep_alive=5
    )


def serve(
    config: Any = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str | None = None,
    *,
    api_key: str | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    request_timeout: float | None = None,
    allow_hosts: tuple[str, ...] = (),
    stall_s: float = DEFAULT_STALL_S,
) -> None:
    """Check the options, load the engine and serve until interrupted."""
    check_options(host, port, api_key, max_queue, request_timeout, stall_s)
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig

    cfg = EngineConfig.of(config)
    # loading takes a minute or more on a CPU: say so, then say when the port answers
    say(f"memloop serve: loading the model ({cfg.model or 'the bundled SmolLM2'}) ...")
    t0 = time.monotonic()
    engine = Engine(cfg)
    name = model_name or engine.lm.path.stem
    say(f"memloop serve: model {name!r} loaded in {time.monotonic() - t0:.0f} s; starting the HTTP server")
    url = f"http://{host}:{port}/v1"
    ready = _Readiness(
        f"memloop serve: ready: {name!r} on {url} (loaded, listening and warmed up after {{s:.0f}} s)", t0
    )
    app = create_app(
        engine,
        name,
        api_key=api_key or None,
        max_queue=max_queue,
        request_timeout=request_timeout,
        allowed_hosts=allowed_hosts_for(host, allow_hosts),
        stall_s=stall_s,
        warmup_batch=engine.config.max_batch,
        on_warm=ready.done,
    )
    try:
        _announcing_server(
            uvicorn_config(app, host, port),
            f"memloop serve: listening on {url}; warming up (compiling the step shapes of batches "
            f"up to {engine.config.max_batch}; requests get 503 + Retry-After until ready)",
            ready,
        ).run()
    finally:
        engine.shutdown()


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _Readiness:
    """Prints the ready line once the port listens and the warm-up is done, whichever comes last."""

    def __init__(self, line: str, t0: float) -> None:
        self.line, self.t0, self.left, self.lock = line, t0, 2, threading.Lock()

    def done(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left == 0:
                say(self.line.format(s=time.monotonic() - self.t0))


def _announcing_server(config: Any, listening: str, ready: _Readiness) -> Any:
    """uvicorn's server that says when its socket listens (uvicorn's own lines depend on its log level; a
    user waiting for a loading model wants this one), then counts towards the ready line."""
    import uvicorn

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                say(listening)
                ready.done()

    return Announcing(config)
