"""One serving class per route family over one engine, as vLLM's `OpenAIServing*`: `ServingCompletion`
(`/v1/completions`), `ServingChat` (`/v1/chat/completions`), `ServingResponses` (`/v1/responses`) and
`ServingModels` (`/health`, `/v1/stats`, `/v1/models`). They share one `RequestGate`, which holds the server's in-flight
count
and bounds every request the same way: checked before anything is queued, admitted only within
`max_queue` (429 past it), cancelled in the engine when its client leaves or its deadline passes.
`server.create_app` only wires these to routes and maps the errors below to HTTP statuses.

A request's deadline and disconnect check (`Watch`) run from the moment its handler starts to its
answer, so they cover queueing for a worker thread too. Tokenising and queueing run on the gate's
own worker threads, never on asyncio's default executor, and nothing on them waits for other work:
prompt scoring waits in the engine's scoring queue, which holds no thread (a pool of threads each
blocked on the scorer used to let abandoned scoring starve every later request)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from memloop.engine.errors import EngineError, NonFiniteLogitsError, RequestError
from memloop.engine.runner.token_pieces import TokenPieces
from memloop.engine.sample.sampling import request_params
from memloop.engine.serve.chunks import ChatChunks, CompletionChunks
from memloop.engine.serve.protocol import (
    MAX_N,
    ChatRequest,
    CompletionRequest,
    FieldError,
    _Sampling,
    _usage,
    chat_logprobs,
    completion_logprobs,
    echo_choice,
)
from memloop.engine.serve.responses_api import ResponseBuilder, ResponseEvents, ResponsesRequest
from memloop.engine.serve.streaming import SSE_HEADERS, ChoiceStream, StreamShape, TokenFeed, stream_body
from starlette.exceptions import HTTPException

from memloop.sampling import raised_by_check

RETRY_AFTER_S = 1
WARMUP_RETRY_AFTER_S = 5  # a warm-up compiles for seconds to minutes: a client need not ask every second
POLL_S = 0.2  # how often a waiting request looks for a client disconnect or its deadline
DEFAULT_WORKERS = min(32, (os.cpu_count() or 1) + 4)  # threads that tokenise and queue (asyncio's default count)
DEFAULT_STALL_S = 300.0  # /health answers 503 once the engine has had work and no progress for this long


class QueueFull(Exception):
    """The server's `max_queue` places are taken (429)."""


class WarmingUp(Exception):
    """The server is compiling its common step shapes and admits nothing yet (503 + Retry-After)."""


class Timeout(Exception):
    """A request ran past the server's `request_timeout` (504)."""


class ClientGone(Exception):
    """The client disconnected while its request ran (499)."""


class ModelNotFound(Exception):
    """The request names a model this server does not serve (404 `model_not_found`, as OpenAI and vLLM)."""


class Watch:
    """One request's deadline and disconnect check, from the start of its handler to its answer."""

    def __init__(self, gate: "RequestGate", http: Request) -> None:
        self.gate = gate
        self.http = http
        self.deadline = None if gate.request_timeout is None else time.monotonic() + gate.request_timeout

    async def wait(self, work: "asyncio.Future[Any]") -> Any:
        """`work`'s result, or ClientGone / Timeout as soon as the client leaves or the deadline passes
        (the caller then stops the work)."""
        work.add_done_callback(lambda g: g.cancelled() or g.exception())  # never "unretrieved"
        while True:
            done, _ = await asyncio.wait({work}, timeout=POLL_S)
            if done:
                return work.result()
            if await self.http.is_disconnected():
                raise ClientGone("the client disconnected; the request was cancelled")
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise self.gate.timeout()

    async def off_loop(self, fn: Callable[..., Any], *args: Any, undo: Callable[[Any], None] | None = None) -> Any:
        """`fn(*args)` on the gate's worker threads, watched from the moment it is queued. If the request
        ends first, `fn` never starts, or, already running, its result goes to `undo` when it comes."""
        job = self.gate.workers.submit(fn, *args)
        try:
            return await self.wait(asyncio.wrap_future(job))
        except BaseException:
            if not job.cancel() and undo is not None:
                job.add_done_callback(lambda f: None if f.cancelled() or f.exception() else undo(f.result()))
            raise


class RequestGate:
    """What every route family shares: the engine, the admission count, the request deadline and the
    worker threads.

    engine: anything with `submit(request) -> Future`, `cancel(future)`, `submit_score`, `cancel_score`,
    `prompt_text`, `problem(stall_s)` and `stats()`. max_queue: engine requests (n choices each count)
    in flight at once. request_timeout: seconds a request may take before it is cancelled (None: no
    limit). workers: threads that tokenise and queue. stall_s: seconds of no progress with work in
    hand after which /health answers 503.
    """

    def __init__(
        self,
        engine: Any,
        model_name: str,
        max_queue: int,
        request_timeout: float | None,
        workers: int = DEFAULT_WORKERS,
        stall_s: float = DEFAULT_STALL_S,
    ) -> None:
        self.engine = engine
        self.model_name = model_name
        self.max_queue = max_queue
        self.request_timeout = request_timeout
        self.stall_s = stall_s
        self.in_flight = 0
        # set once the engine has compiled the shapes small requests need (`warm_up`); until then every
        # request is refused at once with 503 + Retry-After instead of queueing behind the compiles
        self.ready = threading.Event()
        self.ready.set()
        self.workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memloop-intake")
        self._pieces: TokenPieces | None = None  # token texts of streamed log-probabilities, built on first use

    def warm_up(self, max_batch: int, on_done: Callable[[], None] | None = None) -> None:
        """Compile what a burst of small requests needs before admitting any (on a thread of its own): one round
        of short completions per batch bucket up to `max_batch` (1, 2, 4, ...), then open the gate. SGLang
        likewise answers /health 503 until its warm-up request finished; here requests are refused with
        503 + Retry-After meanwhile rather than left waiting behind minutes of compiles."""
        self.ready.clear()

        def run() -> None:
            try:
                k = 1
                while True:
                    n = min(k, max_batch)
                    futs = [
                        self.engine.submit(
                            {
                                "messages": [{"role": "user", "content": f"Say hello {i}."}],
                                "sampling": {"max_tokens": 4, "temperature": 0.0},
                            }
                        )
                        for i in range(n)
                    ]
                    for f in futs:
                        f.result()
                    if n >= max_batch:
                        break
                    k *= 2
            finally:  # a failed warm-up leaves the engine as it is; requests then find the failure themselves
                if on_done is not None:
                    on_done()
                self.ready.set()

        threading.Thread(target=run, name="memloop-warmup", daemon=True).start()

    def watch(self, http: Request) -> Watch:
        return Watch(self, http)

    def close(self) -> None:
        self.workers.shutdown(wait=False, cancel_futures=True)

    def check(self, req: _Sampling) -> None:
        """Refuse what this server does not do, naming the field, before anything is queued."""
        req.refuse_fields()
        req.logprob_count()  # a bad logprobs/top_logprobs is a 400 naming it, before anything is queued
        req.output_limit()
        self.check_model(req.model)

    def check_model(self, model: str | None) -> None:
        if model not in (None, self.model_name):
            raise ModelNotFound(
                f"The model {model!r} does not exist; this server serves {self.model_name!r} (see /v1/models)"
            )

    def _submit_all(self, requests: list[dict[str, Any]], feed: TokenFeed | None = None) -> list[Future]:
        """Tokenise and queue (on a worker thread); the first invalid request cancels the rest. With a
        feed, each request's tokens go to it as they are sampled (a streamed answer)."""
        futs: list[Future] = []
        for i, r in enumerate(requests):
            fut = self.engine.submit(r) if feed is None else self.engine.submit(r, on_token=feed.sink(i))
            futs.append(fut)
            if fut.done() and fut.exception() is not None:
                self._cancel_all(futs)
                raise fut.exception()
        return futs

    def _cancel_all(self, futs: list[Future]) -> None:
        for f in futs:  # no-op for finished ones; frees the batch slots of the others
            self.engine.cancel(f)

    def timeout(self) -> Timeout:
        return Timeout(
            f"the request did not finish within {self.request_timeout:g} s (the server's "
            "--request-timeout); lower max_tokens, send shorter prompts, or retry when the "
            "server is less busy"
        )

    def admit(self, count: int) -> None:
        """Take `count` of the server's `max_queue` places (engine requests or prompts scored); the caller
        gives them back (`in_flight -= count`) however the request ends."""
        if not self.ready.is_set():
            raise WarmingUp(
                f"the server is warming up (compiling the engine's common step shapes); retry after "
                f"{WARMUP_RETRY_AFTER_S} s, or wait until /health answers ok"
            )
        if count > self.max_queue:  # could never be admitted: retrying would loop forever
            raise RequestError(
                f"this request asks for {count} completions (prompts x n) but the server "
                f"admits at most {self.max_queue} at once (--max-queue); lower n or send fewer "
                "prompts"
            )
        if self.in_flight + count > self.max_queue:
            raise QueueFull(
                f"the server is busy ({self.in_flight} requests in flight, --max-queue "
                f"{self.max_queue}); retry after {RETRY_AFTER_S} s"
            )
        self.in_flight += count

    @asynccontextmanager
    async def admitted(self, count: int) -> AsyncIterator[None]:
        """Hold `count` of the server's `max_queue` places meanwhile."""
        self.admit(count)
        try:
            yield
        finally:
            self.in_flight -= count

    async def run(self, watch: Watch, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Generate every request (one per choice), all checked before any is queued."""
        for r in requests:
            request_params(r["sampling"])
        async with self.admitted(len(requests)):
            futs = await watch.off_loop(self._submit_all, requests, undo=self._cancel_all)
            try:
                return await watch.wait(asyncio.gather(*(asyncio.wrap_future(f) for f in futs)))
            finally:
                self._cancel_all(futs)

    async def stream(self, watch: Watch, requests: list[dict[str, Any]], shape: StreamShape) -> StreamingResponse:
        """Generate every request (one per choice) as a Server-Sent Events answer. Everything that can be
        a 4xx (sampling, prompt length, schema, the queue) is settled before the 200 goes out; from then
        on the engine's requests and queue places are held until the body ends, the deadline passes or
        the client disconnects (Starlette cancels the body then), and freed at once. Queueing runs on the
        gate's worker threads under the request's `Watch`, as a non-streamed request's does."""
        params = [request_params(r["sampling"]) for r in requests]
        count = len(requests)
        self.admit(count)
        try:
            feed = TokenFeed()
            futs = await watch.off_loop(self._submit_all, requests, feed, undo=self._cancel_all)
        except BaseException:
            self.in_flight -= count
            raise
        feed.watch(futs)

        def close() -> None:
            self._cancel_all(futs)
            self.in_flight -= count

        if shape.logprobs and self._pieces is None:
            self._pieces = TokenPieces(self.engine.tokenizer.hf)
        pieces = self._pieces if shape.logprobs else None
        choices = [ChoiceStream(self.engine.tokenizer.decode, pieces, p.stop) for p in params]
        body = stream_body(feed, shape, choices, watch.deadline, self.timeout, error_payload)
        return ClosingStream(body, close)


class ServingCompletion:
    """`POST /v1/completions`: text or token-id prompts, n choices, `echo` with prompt log-probabilities."""

    def __init__(self, gate: RequestGate) -> None:
        self.gate = gate

    async def create(self, req: CompletionRequest, http: Request) -> dict[str, Any] | Response:
        gate = self.gate
        watch = gate.watch(http)
        gate.check(req)
        prompts = req.prompts()
        if not prompts or len(prompts) * req.n > MAX_N:
            raise RequestError(f"send 1 to {MAX_N} prompts x n per request")
        echo, top_n = req.echoed(), req.logprob_count()
        requests = [
            {"prompt": p, "sampling": req.sampling(i), "json_schema": None} for p in prompts for i in range(req.n)
        ]
        if req.stream:
            if echo:
                raise FieldError(
                    "`stream` with `echo` is not supported: echo answers whole prompts (their "
                    "log-probabilities come from one scoring); send stream: false",
                    "stream",
                )
            return await gate.stream(
                watch, requests, CompletionChunks(gate.model_name, req.include_usage(), top_n is not None)
            )
        if req.generates():
            results: list[dict[str, Any] | None] = list(await gate.run(watch, requests))
        else:  # echo with max_tokens 0: the other sampling fields are still checked
            for r in requests:
                request_params({**r["sampling"], "max_tokens": 1})
            results = [None] * len(requests)
        if echo:
            shown = await self._echoed_prompts(watch, prompts, top_n)
            choices = [echo_choice(shown[i // req.n], r, top_n is not None) for i, r in enumerate(results)]
            usage = _usage(
                [
                    r
                    or {
                        "usage": {
                            "prompt_tokens": len(shown[i // req.n]["ids"]),
                            "cached_tokens": 0,
                            "decoded_tokens": 0,
                        }
                    }
                    for i, r in enumerate(results)
                ]
            )
        else:
            choices = [
                {
                    "text": r["text"],
                    "finish_reason": r["finish_reason"],
                    "logprobs": completion_logprobs(r["logprobs"]) if "logprobs" in r else None,
                }
                for r in results
                if r is not None
            ]
            usage = _usage(results)  # type: ignore[arg-type]
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": gate.model_name,
            "choices": [{"index": i, **c} for i, c in enumerate(choices)],
            "usage": usage,
        }

    async def _echoed_prompts(
        self, watch: Watch, prompts: list[str | list[int]], top_n: int | None
    ) -> list[dict[str, Any]]:
        """Each prompt's {"ids", "text", "entries"}: scored by the engine when log-probabilities are asked
        (`Engine.submit_score`, a forward over every prompt token), else only tokenised. Scoring is
        bounded like generation: past the timeout or once the client leaves, the request ends, its
        queue places are freed and the engine drops its scoring, or stops it at its next stage."""
        engine = self.gate.engine
        if top_n is None:
            return await watch.off_loop(lambda: [engine.prompt_text(p) for p in prompts])
        async with self.gate.admitted(len(prompts)):
            fut = await watch.off_loop(engine.submit_score, prompts, top_n, undo=engine.cancel_score)
            try:
                return await watch.wait(asyncio.wrap_future(fut))
            finally:
                engine.cancel_score(fut)  # no-op once it has finished


class ServingChat:
    """`POST /v1/chat/completions`: messages through the chat template, `response_format` JSON output."""

    def __init__(self, gate: RequestGate) -> None:
        self.gate = gate

    async def create(self, req: ChatRequest, http: Request) -> dict[str, Any] | Response:
        gate = self.gate
        watch = gate.watch(http)
        gate.check(req)
        schema = req.schema()
        messages = [m.model_dump() for m in req.messages]
        requests = [{"messages": messages, "sampling": req.sampling(i), "json_schema": schema} for i in range(req.n)]
        if req.stream:
            return await gate.stream(
                watch, requests, ChatChunks(gate.model_name, req.include_usage(), req.logprob_count() is not None)
            )
        results = await gate.run(watch, requests)
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": r["text"]},
                "finish_reason": r["finish_reason"],
                "logprobs": chat_logprobs(r["logprobs"]) if "logprobs" in r else None,
            }
            for i, r in enumerate(results)
        ]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": gate.model_name,
            "choices": choices,
            "usage": _usage(results),
        }


class ServingResponses:
    """`POST /v1/responses`: the Responses API for text in and out (`memloop.engine.serve.responses_api`)."""

    def __init__(self, gate: RequestGate) -> None:
        self.gate = gate

    async def create(self, req: ResponsesRequest, http: Request) -> dict[str, Any] | Response:
        gate = self.gate
        watch = gate.watch(http)
        req.refuse_fields()
        req.logprob_count()
        gate.check_model(req.model)
        request = {"messages": req.messages(), "sampling": req.sampling(), "json_schema": req.schema()}
        builder = ResponseBuilder(req, gate.model_name)
        if req.stream:
            return await gate.stream(watch, [request], ResponseEvents(builder))
        (result,) = await gate.run(watch, [request])
        return builder.finished(result)


class ServingModels:
    """`GET /health`, `/v1/stats` (the engine's, with the server's queue) and `/v1/models`."""

    def __init__(self, gate: RequestGate) -> None:
        self.gate = gate

    async def health(self) -> Any:
        """{"ok": true}, or 503 {"ok": false, "reason"} when the engine cannot make progress or is still
        warming up (`"status": "warming up"`)."""
        if not self.gate.ready.is_set():
            return JSONResponse(
                status_code=503,
                headers={"Retry-After": str(WARMUP_RETRY_AFTER_S)},
                content={"ok": False, "status": "warming up", "reason": "compiling the engine's common step shapes"},
            )
        problem = self.gate.engine.problem(self.gate.stall_s)
        if problem is not None:
            return JSONResponse(status_code=503, content={"ok": False, "reason": problem})
        return {"ok": True}

    async def stats(self) -> dict[str, Any]:
        return {
            **self.gate.engine.stats(),
            "server_in_flight": self.gate.in_flight,
            "server_max_queue": self.gate.max_queue,
        }

    async def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": self.gate.model_name, "object": "model", "created": 0, "owned_by": "memloop"}],
        }


def error_response(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    """OpenAI's error body: {"error": {"message", "type", "param", "code"}} (clients read `param`: the field)."""
    return JSONResponse(
        status_code=status,
        headers=headers,
        content={"error": {"message": message, "type": kind, "param": param, "code": code}},
    )


def error_payload(exc: Exception) -> dict[str, Any]:
    """An error in a stream, OpenAI's {message, type, param, code} (the 200 has gone out: the status it
    would have had goes in `code`)."""
    status, kind, _ = ERROR_STATUS.get(type(exc), (500, "engine_error", None))
    if isinstance(exc, RequestError) and type(exc) not in ERROR_STATUS:
        status, kind = 400, "invalid_request_error"
    return {"message": str(exc), "type": kind, "param": getattr(exc, "param", None), "code": status}


class ClosingStream(StreamingResponse):
    """A Server-Sent Events answer that runs `close` however it ends: sent whole, cut by a client's
    disconnect (Starlette then cancels the body, which may never have started) or failed."""

    def __init__(self, body: AsyncIterator[bytes], close: Callable[[], None]) -> None:
        super().__init__(body, media_type="text/event-stream", headers=SSE_HEADERS)
        self.close = close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.close()


async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {}
    loc = [str(x) for x in first.get("loc", ())]
    where = ".".join(loc)
    message = raised_by_check(first) or first.get("msg", "malformed")  # a sampling bound: the one message
    return error_response(400, f"invalid request at {where or 'body'}: {message}", param=".".join(loc[1:]) or None)


async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:  # 404, 405, unparsable bodies
    message = str(exc.detail)
    if exc.status_code == 400:  # FastAPI could not parse the body at all
        message += "; send one JSON object (numbers of at most 4300 digits)"
    return error_response(exc.status_code, message, headers=exc.headers)


# Each error a route can raise, as (status, OpenAI error type, extra headers).
ERROR_STATUS: dict[type[Exception], tuple[int, str, dict[str, str] | None]] = {
    RequestError: (400, "invalid_request_error", None),
    EngineError: (503, "engine_error", None),
    NonFiniteLogitsError: (500, "engine_error", None),  # the same again on a retry: not 503
    QueueFull: (429, "rate_limit_error", {"Retry-After": str(RETRY_AFTER_S)}),
    WarmingUp: (503, "service_unavailable", {"Retry-After": str(WARMUP_RETRY_AFTER_S)}),
    Timeout: (504, "timeout_error", None),
    ClientGone: (499, "client_closed_request", None),  # nobody reads it; the log does
    ModelNotFound: (404, "invalid_request_error", None),
}
ERROR_CODE = {ModelNotFound: "model_not_found"}


def install_error_handlers(app: FastAPI) -> None:
    """Every error as OpenAI's {"error": {"message", "type"}} with its status."""
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    for kind, (status, name, headers) in ERROR_STATUS.items():

        async def handler(
            _: Request,
            exc: Exception,
            status: int = status,
            name: str = name,
            headers: dict[str, str] | None = headers,
            code: str | None = ERROR_CODE.get(kind),
        ) -> JSONResponse:
            param = getattr(exc, "param", None) or ("model" if code == "model_not_found" else None)
            return error_response(status, str(exc), name, headers, param, code)

        app.add_exception_handler(kind, handler)
