"""Host headers a loopback app answers (True) or refuses (False): one table for the engine's server and the
results viewer, which stand behind the same guard (memloop.web_guard) and must agree on every row."""

from __future__ import annotations

LOOPBACK_HOST_HEADERS = {
    "[::1]:8000": True,  # IPv6 loopback in a URL: the brackets stay in the Host header
    "[::1]": True,
    "localhost:8000": True,
    "127.0.0.1": True,
    "[::2]:8000": False,  # another IPv6 address
    "::1": False,  # a bare IPv6 literal is no valid Host header (RFC 3986 brackets it); the server once took it
    "[::1": False,  # malformed
    "evil.example": False,  # DNS rebinding
}
