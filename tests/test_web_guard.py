"""The one web guard of the engine's server and the viewer (memloop.web_guard): what counts as loopback, which
Host names a bound address answers to, and that both apps' option checks read an IPv6 literal alike."""

from __future__ import annotations

import pytest
from memloop.engine.errors import ServerConfigError
from memloop.engine.serve.server import allowed_hosts_for, check_options
from memloop.jobs.results.view.app import check_bind
from memloop.jobs.results.view.errors import ViewError

from memloop.web_guard import header_form, host_names, is_loopback


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("[::]", False),
        ("10.1.2.3", False),
        ("fd00::5", False),
        ("[fd00::5]", False),
        ("box.lan", False),
    ],
)
def test_loopback_is_one_answer_for_both_apps(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    # neither app starts off loopback without a key; both start on loopback without one
    if loopback:
        check_options(host, 8000, None)
        check_bind(host, None)
    else:
        with pytest.raises(ServerConfigError, match="MEMLOOP_API_KEY"):
            check_options(host, 8000, None)
        with pytest.raises(ViewError, match="MEMLOOP_API_KEY"):
            check_bind(host, None)


def test_the_bracketed_ipv6_loopback_binds_like_the_bare_one() -> None:
    """`--host [::1]` was refused by the server without a key (its own is_loopback did not strip brackets) and
    then, with one, answered any Host name; the viewer took it as loopback."""
    assert allowed_hosts_for("[::1]") == allowed_hosts_for("::1") == ("localhost", "127.0.0.1", "[::1]")
    assert allowed_hosts_for("10.1.2.3") is None  # off loopback the key guards the server, whatever the Host
    assert allowed_hosts_for("127.0.0.1", ("box.lan", "fd00::7")) == (
        "localhost",
        "127.0.0.1",
        "[::1]",
        "box.lan",
        "[fd00::7]",
    )


def test_host_names_are_spelled_as_a_host_header_spells_them() -> None:
    assert header_form("::1") == header_form("[::1]") == header_form("[0:0::1]") == "[::1]"
    assert header_form("Box.LAN") == "box.lan" and header_form("127.0.0.1") == "127.0.0.1"
    assert host_names("fd00::5") == ("localhost", "127.0.0.1", "[::1]", "[fd00::5]")
    assert (
        host_names("0.0.0.0", ("viewer.lan",))
        == host_names("[::]", ("viewer.lan",))
        == ("localhost", "127.0.0.1", "[::1]", "viewer.lan")
    )
