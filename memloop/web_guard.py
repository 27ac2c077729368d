"""The guard in front of memloop's two web apps: the engine's OpenAI-compatible server and the results viewer.

Both bind to loopback by default and need an API key anywhere else (`is_loopback`); both answer only the
`Host` names they were given (`host_names`, `HostGuard`), so a web page cannot reach a keyless local app
through DNS rebinding; both take the key from the `Authorization` header (`KeyGuard`). The decisions are the
libraries': Starlette's `TrustedHostMiddleware` parses and matches the Host header (IPv6 brackets, ports,
malformed headers), FastAPI's `HTTPBearer` and `HTTPBasic` read the credentials. What is memloop's is the
answer a refused request gets, which each app words in its own format (the server's OpenAI error JSON, the
viewer's text), saying what to do.

This module sits on the floor of the import layers, beside `memloop.errors`, so the engine and the jobs
layer share one definition of "loopback" (the two copies they had disagreed on `[::1]`).
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Callable, Sequence

from fastapi.security import HTTPBasic, HTTPBearer
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::")  # every interface: not a name a browser reaches the app by

HostRefusal = Callable[[str, tuple[str, ...]], Response]  # (the Host header sent, the names answered) -> answer


def bare_host(host: str) -> str:
    """`host` lower-cased, without the brackets an IPv6 literal carries in a URL or a Host header."""
    name = host.strip().lower()
    return name[1:-1] if name.startswith("[") and name.endswith("]") else name


def is_loopback(host: str) -> bool:
    """Whether an app bound to `host` is reachable from this machine only.

    Loopback is `localhost`, 127.0.0.0/8 or `::1` (an IPv6 literal with or without brackets). Any other name
    may resolve to anything.
    """
    name = bare_host(host)
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def header_form(name: str) -> str:
    """`name` as a Host header spells it.

    Lower-case, an IPv6 literal compressed and in brackets (RFC 3986): the form `TrustedHostMiddleware` compares.
    """
    bare = bare_host(name)
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return bare
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def host_names(bound: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The Host names an app bound to `bound` answers to, in their header form.

    The loopback names, the bound address (unless it is a wildcard) and `extra` (`--allow-host`).
    """
    names = [*LOOPBACK_NAMES, *extra]
    if bare_host(bound) not in WILDCARD_BINDS:
        names.append(bound)
    return tuple(dict.fromkeys(header_form(n) for n in names))


_ADMITTED = "memloop.host_admitted"


class HostGuard:
    """ASGI middleware that refuses a request for a Host outside `allowed`.

    Such a request gets `refusal(host, allowed)` before anything else runs (DNS rebinding: a page on
    evil.example that resolves its own name to 127.0.0.1 sends `Host: evil.example`).

    `TrustedHostMiddleware` decides; only its plain "Invalid host header" answer is replaced by the app's own,
    which names the header and the option that would admit it.
    """

    def __init__(self, app: ASGIApp, allowed: Sequence[str], refusal: HostRefusal) -> None:
        self.app = app
        self.allowed = tuple(dict.fromkeys(header_form(n) for n in allowed))
        self.refusal = refusal
        self.trusted = TrustedHostMiddleware(self._admit, allowed_hosts=list(self.allowed), www_redirect=False)

    @staticmethod
    async def _admit(scope: Scope, receive: Receive, send: Send) -> None:
        scope[_ADMITTED] = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on to the app, or answer it with the refusal."""
        if scope["type"] != "http":  # neither app answers websockets
            return await self.app(scope, receive, send)
        await self.trusted(scope, receive, _discard)  # a refusal's own answer goes nowhere
        if scope.pop(_ADMITTED, False):
            return await self.app(scope, receive, send)
        await self.refusal(Headers(scope=scope).get("host", ""), self.allowed)(scope, receive, send)


async def _discard(message: Message) -> None:
    return None


class KeyGuard:
    """ASGI middleware that asks every request but those for `open_paths` for the API key.

    The key comes as `Authorization: Bearer KEY` (read by FastAPI's `HTTPBearer`) or, with `basic`, as the
    password of HTTP Basic (`HTTPBasic`; browsers ask for it on a 401), compared in constant time; others get
    `refusal()`. It runs before the body is read, and guards every path the app answers (its docs, an unknown
    route), which a route dependency would not.
    """

    def __init__(
        self,
        app: ASGIApp,
        key: str,
        refusal: Callable[[], Response],
        basic: bool = False,
        open_paths: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.key = key.encode()
        self.refusal = refusal
        self.bearer = HTTPBearer(auto_error=False)
        self.basic = HTTPBasic(auto_error=False) if basic else None
        self.open_paths = frozenset(open_paths)

    async def key_given(self, request: HTTPConnection) -> bool:
        """Whether the request carries the key (Bearer, or Basic's password where allowed)."""
        bearer = await self.bearer(request)
        if bearer is not None:  # header values are latin-1: encoding gives back the bytes sent
            return hmac.compare_digest(bearer.credentials.encode("latin-1"), self.key)
        if self.basic is None:
            return False
        try:
            basic = await self.basic(request)
        except HTTPException:  # a Basic header that does not decode (HTTPBasic raises even without auto_error)
            return False
        return basic is not None and hmac.compare_digest(basic.password.encode(), self.key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass a request with the key, or for an open path, on to the app; refuse the others."""
        if (
            scope["type"] != "http"
            or scope.get("path") in self.open_paths
            or await self.key_given(HTTPConnection(scope))
        ):
            return await self.app(scope, receive, send)
        await self.refusal()(scope, receive, send)
