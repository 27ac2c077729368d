"""A whole-request deadline for httpx's synchronous client.

httpx's timeouts are per phase: each connect, each write and each read of the socket may take the
whole timeout, so an endpoint that answers 200 and then sends a byte a second (or a gateway that
sends keep-alive bytes) holds a request as long as it likes. `DeadlineTransport` caps every socket
wait at what is left of the calling thread's deadline (`request_deadline`), so connecting, sending,
waiting for the headers and reading the body end by it together; past it the wait raises httpx's
own timeout. A thread with no deadline set gets httpx's timeouts unchanged. The synchronous client
does a request's I/O on the calling thread, which is what makes a thread-local deadline the
request's.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from typing import Any, Iterable, Iterator

import httpcore
import httpx

_local = threading.local()


@contextlib.contextmanager
def request_deadline(at: float) -> Iterator[None]:
    """Requests sent by this thread meanwhile end by `at` (a `time.monotonic()` value)."""
    before = getattr(_local, "at", None)
    _local.at = at
    try:
        yield
    finally:
        _local.at = before


def _capped(timeout: float | None, late: type[Exception]) -> float | None:
    at = getattr(_local, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise late("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _capped(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _capped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _capped(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(
            self._inner.connect_tcp(
                host, port, _capped(timeout, httpcore.ConnectTimeout), local_address, socket_options
            )
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, _capped(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's own transport, its connection pool's socket waits capped by `request_deadline`.

    httpx takes no network backend, so the pool's is wrapped in place; `tests/methods/
    test_llm_http_deadline.py` fails loudly if a new httpx moves it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        pool = self._pool
        if not isinstance(getattr(pool, "_network_backend", None), httpcore.NetworkBackend):
            raise RuntimeError(
                f"httpx {httpx.__version__} / httpcore {httpcore.__version__}: the connection pool "
                "has no network backend to wrap; pin httpx<0.29 or update memloop.eval.http_deadline"
            )
        pool._network_backend = _Backend(pool._network_backend)
