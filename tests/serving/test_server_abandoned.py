"""Abandoned work never starves the server, and /health says when the engine cannot make progress
(issue #58, point 1), on the real server over 127.0.0.1 and the bundled model.

The server used to run prompt scoring on asyncio's default executor (`min(32, cpus + 4)` threads),
where each scoring request's thread blocked on the scorer's lock until the call before it ended,
abandoned or not; a later request's submission then queued for a thread outside its timeout and
disconnect watch, and waited as long as the abandoned call ran, while /health said ok."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.http_server import serve_app
from tests.serving.test_server_limits import wait_for

pytestmark = pytest.mark.timeout(600)

TIMEOUT_S = 2.0  # the server's --request-timeout in these tests
LATER_WAIT_S = 30.0  # how long a later request may take to be answered: generous beside TIMEOUT_S
# One prompt in the 4096-token bucket: one scoring call of tens of seconds on a small CPU host.
LONG_IDS = [100 + i % 1000 for i in range(4000)]


def _app(engine: Any, **kw: Any) -> Any:
    from memloop.engine.serve.server import create_app

    return create_app(engine, "smollm2", **kw)


def _post(url: str, body: dict, timeout: float = 300) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json=body, timeout=timeout)


def test_abandoned_scoring_does_not_starve_later_requests(make_engine):
    """More abandoned scoring requests than asyncio's default executor has threads: each is a 504 at
    the timeout, a later 4-token completion is answered (200, or 504 at its own timeout) instead of
    waiting for the abandoned call, the scorer stops the abandoned work and goes idle, none of it is
    counted as delivered, and the engine serves the next request."""
    from memloop.engine.serve.server import create_app

    eng = make_engine()
    short = {"prompt": "Hi", "max_tokens": 4, "temperature": 0}
    eng.complete({"prompt": "Hi", "sampling": {"max_tokens": 4, "temperature": 0}}, timeout=300)  # decode compiled
    abandoned = min(32, (os.cpu_count() or 1) + 4) + 2  # asyncio's default executor's threads, and more
    scoring = {"prompt": LONG_IDS, "echo": True, "logprobs": 1, "max_tokens": 0}
    delivered = eng.stats()["scored_prompts"]
    with serve_app(create_app(eng, "smollm2", request_timeout=TIMEOUT_S)) as url:
        with ThreadPoolExecutor(abandoned) as clients:
            answers = list(clients.map(lambda _: _post(url, scoring), range(abandoned)))
        assert [a.status_code for a in answers] == [504] * abandoned, [a.text[:200] for a in answers]
        try:
            later = _post(url, short, timeout=LATER_WAIT_S)
        except httpx.TimeoutException:
            pytest.fail(
                f"a 4-token completion got no answer within {LATER_WAIT_S:g} s although the server's "
                f"--request-timeout is {TIMEOUT_S:g} s: abandoned scoring starved the server"
            )
        assert later.status_code in (200, 504), later.text
        health = httpx.get(f"{url}/health", timeout=LATER_WAIT_S)
        assert health.status_code == 200 and health.json()["ok"] is True, health.text
        wait_for(lambda: _scorer_idle(url), "the scorer to drop the abandoned work")
    assert eng.stats()["scored_prompts"] == delivered  # nothing abandoned was delivered
    with serve_app(create_app(eng, "smollm2")) as url:
        assert _post(url, short).status_code == 200


def _scorer_idle(url: str) -> bool:
    stats = httpx.get(f"{url}/v1/stats", timeout=LATER_WAIT_S).json()
    return stats["scoring_running"] == 0 and stats["scoring_queued"] == 0


def test_a_request_waiting_for_a_worker_thread_still_gets_its_timeout(make_engine):
    """A request whose tokenising queues behind another for the server's worker threads is under its
    deadline from the start: with the one worker busy tokenising a 15 MB prompt (seconds), a second,
    tiny request is a 504 at its timeout, not an answer whenever the worker frees up."""
    eng = make_engine()
    huge = {"prompt": "word " * 3_000_000, "max_tokens": 1}
    with serve_app(_app(eng, request_timeout=1.0, max_body_bytes=32 << 20, workers=1)) as url:
        with ThreadPoolExecutor(1) as clients:
            first = clients.submit(_post, url, huge)
            wait_for(lambda: httpx.get(f"{url}/v1/stats").json()["server_in_flight"] == 1, "the huge prompt")
            t0 = time.monotonic()
            second = _post(url, {"prompt": "Hi", "max_tokens": 2}, timeout=LATER_WAIT_S)
            waited = time.monotonic() - t0
            assert second.status_code == 504 and "--request-timeout" in second.json()["error"]["message"]
            assert waited < 5.0, waited  # its 1 s deadline and a poll, not the rest of the tokenising
            assert first.result().status_code == 504


def test_health_reports_an_engine_that_makes_no_progress(make_engine):
    """/health answers 503 with the reason while the step loop has work and cannot progress (here: its
    lock is held), and ok again once it moves."""
    eng = make_engine()
    with serve_app(_app(eng, stall_s=0.5)) as url:
        assert httpx.get(f"{url}/health").json() == {"ok": True}
        fut = eng.submit({"prompt": "1, 2, 3,", "sampling": {"max_tokens": 64, "stop_token_ids": []}})
        with eng._lock:  # the step loop can neither plan nor finish a step
            seen: list[httpx.Response] = []
            wait_for(
                lambda: seen.append(httpx.get(f"{url}/health")) or seen[-1].status_code == 503,
                "/health to report the stalled engine",
                limit_s=60,
            )
            body = seen[-1].json()
            assert body["ok"] is False and "no progress" in body["reason"], body
        fut.result(timeout=300)
        wait_for(lambda: httpx.get(f"{url}/health").status_code == 200, "/health to recover", limit_s=60)


def test_health_reports_a_scorer_that_makes_no_progress(make_engine):
    """A scoring call whose stages each take longer than the stall bound is reported (here the bound
    is set below one stage's time on any host; the default is minutes)."""
    eng = make_engine()
    with serve_app(_app(eng, stall_s=0.01)) as url:
        with ThreadPoolExecutor(1) as clients:
            scored = clients.submit(
                _post, url, {"prompt": LONG_IDS[:500], "echo": True, "logprobs": 0, "max_tokens": 0}
            )
            reasons: list[str] = []

            def stalled() -> bool:
                r = httpx.get(f"{url}/health")
                if r.status_code == 503:
                    reasons.append(r.json()["reason"])
                return bool(reasons) or scored.done()

            wait_for(stalled, "/health to report the busy scorer", limit_s=300)
            assert reasons and "scor" in reasons[0], reasons
            assert scored.result().status_code == 200
