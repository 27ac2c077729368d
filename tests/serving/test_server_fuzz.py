"""Random request bodies against the real server on the bundled model, each alongside a valid request:
every valid request succeeds, every invalid one gets a 4xx, nothing gets a 5xx, and /health keeps
answering throughout (a poller in the background). That heavy work cannot stall /health is checked
by where it runs (tokenising happens on a worker thread, never the event loop's), not by timing."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.http_server import serve_app

pytestmark = pytest.mark.timeout(900)


class HealthPoller:
    """GETs /health every 100 ms in a thread; remembers any failure (an error status, a wrong body, no
    answer within the transport's 30 s: a hang guard, not a speed bound)."""

    def __init__(self, url: str) -> None:
        self.url, self.failures, self.count = url, [], 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as c:
            while not self._stop.wait(0.1):
                try:
                    r = c.get("/health")
                    ok = r.status_code == 200 and r.json() == {"ok": True}
                except httpx.HTTPError as exc:
                    ok, r = False, exc
                self.count += 1
                if not ok:
                    self.failures.append(repr(r))

    def __enter__(self) -> "HealthPoller":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def check(self) -> None:
        assert self.count > 0 and not self.failures, self.failures[:3]


@pytest.fixture(scope="module")
def fuzz_url(engine) -> Iterator[str]:
    from memloop.engine.serve.server import create_app

    with serve_app(create_app(engine, "smollm2")) as url:  # the real 8 MiB body limit
        yield url


def nested_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


# -- valid requests: small (1-3 tokens) so a run stays short ----------------------------------------------
_words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)
_valid_sampling = st.fixed_dictionaries(
    {"max_tokens": st.integers(1, 3)},
    optional={
        "temperature": st.floats(0, 2),
        "top_k": st.integers(0, 2**31 - 1),
        "top_p": st.floats(0.01, 1.0),
        "seed": st.integers(-(2**40), 2**40),
        "stop": st.one_of(_words, st.lists(_words, max_size=3)),
        "n": st.integers(1, 2),
        "model": st.just("smollm2"),
        "user": _words,
    },
)
_valid_completion = st.builds(lambda p, s: {"prompt": "Say " + p, **s}, _words, _valid_sampling)
_valid_chat = st.builds(
    lambda c, s, rf: {"messages": [{"role": "user", "content": c}], **s, **rf},
    _words,
    _valid_sampling,
    st.sampled_from(
        [
            {},
            {"response_format": {"type": "json_object"}},
            {"response_format": {"type": "json_schema", "json_schema": {"schema": nested_schema(3)}}},
        ]
    ),
)
valid_bodies = st.one_of(_valid_completion, _valid_chat)

# -- invalid values, per field, known to be out of range or of the wrong type ---------------------------
_junk = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["NaN", "Infinity", "-inf", "1e999", "0x10", ""]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_huge = st.one_of(st.integers(2**63, 10**300), st.integers(-(10**300), -(2**63) - 1))
_bad = {
    "max_tokens": st.one_of(
        _junk, _huge, st.integers(-5, 0), st.integers(10**5, 2**40), st.floats(1.5, 3.5), st.booleans()
    ),
    "temperature": st.one_of(
        _junk, _huge, st.floats(max_value=-1e-9), st.floats(min_value=100.5), st.just(float("nan")), st.booleans()
    ),
    "top_p": st.one_of(_junk, _huge, st.floats(max_value=0), st.floats(min_value=1.001), st.just(float("nan"))),
    "top_k": st.one_of(_junk, _huge, st.integers(max_value=-1), st.integers(2**31, 2**62), st.floats(0.5, 9.5)),
    "seed": st.one_of(_junk.filter(lambda v: v != ""), _huge, st.floats(0.5, 9.5)),
    "stop": st.one_of(
        st.integers(),
        st.just([""]),
        st.lists(st.integers(), min_size=1, max_size=3),
        st.lists(st.just("x"), min_size=17, max_size=20),
        st.just(["y" * 1001]),
    ),
    "stop_token_ids": st.one_of(
        st.text(min_size=1, max_size=3),
        st.just([-1]),
        st.just([2**31]),
        st.just([49152]),
        st.lists(_huge, min_size=1, max_size=2),
    ),
    "n": st.one_of(st.integers(max_value=0), st.integers(65, 10**9), st.just(1.5), st.just("two")),
    "model": st.just("gpt-17"),
    "stream": st.sampled_from(["yes", "true", 1, 0, [True]]),
    "prompt": st.one_of(st.integers(), st.just(""), st.just([]), st.just([None])),
    "messages": st.one_of(
        st.just([]), st.just([{"role": "wizard", "content": "x"}]), st.just("hi"), st.just([{"role": "user"}])
    ),
    "response_format": st.one_of(
        st.integers(60, 300).map(lambda d: {"type": "json_schema", "json_schema": {"schema": nested_schema(d)}}),
        st.just({"type": "bogus"}),
        st.just({"type": "json_schema", "json_schema": {"schema": 5}}),
        st.just({"type": "json_schema", "json_schema": {"schema": {"type": 5}}}),
    ),
}


@st.composite
def invalid_bodies(draw: Any) -> dict[str, Any]:
    """A valid body with 1-3 fields replaced by values known to be invalid for its route."""
    body = dict(draw(valid_bodies))
    chat = "messages" in body
    # the other route's fields stay out: they are refused as unknown fields, whatever their value
    fields = sorted(set(_bad) - ({"prompt"} if chat else {"messages", "response_format"}))
    for field in draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3, unique=True)):
        body[field] = draw(_bad[field])
    return body


def _post(c: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    return c.post(path, content=json.dumps(body, allow_nan=True), headers={"content-type": "application/json"})


@pytest.fixture(scope="module")
def client(fuzz_url) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fuzz_url, timeout=300) as c:
        yield c


@pytest.fixture(scope="module")
def health(fuzz_url) -> Iterator[HealthPoller]:
    with HealthPoller(fuzz_url) as poller:
        yield poller


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(valid=valid_bodies, invalid=invalid_bodies())
def test_random_bodies_never_harm_valid_ones(client, health, valid, invalid):
    with ThreadPoolExecutor(2) as pool:
        good, bad = pool.map(lambda b: _post(client, b), [valid, invalid])
    assert good.status_code == 200, (valid, good.text)
    assert len(good.json()["choices"]) == valid.get("n", 1)
    assert 400 <= bad.status_code < 500, (invalid, bad.status_code, bad.text)
    assert bad.json()["error"]["message"]
    health.check()


_any_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**300), 10**300) | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.fixed_dictionaries({}, optional={k: _any_json for k in [*_bad, "response_format"]}),
    st.sampled_from(["/v1/completions", "/v1/chat/completions"]),
)
def test_arbitrary_json_never_gets_a_5xx(client, health, body, path):
    """Random types and magnitudes in every field: whatever the server answers, it is never a 5xx."""
    if (
        isinstance(body.get("max_tokens"), int)
        and not isinstance(body["max_tokens"], bool)
        and 3 < body["max_tokens"] < 10**5
        or "max_tokens" not in body
        or body.get("max_tokens") is None
    ):
        body["max_tokens"] = 2  # keep accepted requests short; the value is not what is fuzzed here
    if isinstance(body.get("n"), int) and not isinstance(body["n"], bool):
        body["n"] = body["n"] if not 2 < body["n"] <= 64 else 2
    r = client.post(path, content=json.dumps(body, allow_nan=True), headers={"content-type": "application/json"})
    assert r.status_code < 500, (body, r.status_code, r.text)
    if r.status_code != 200:
        assert 400 <= r.status_code < 500 and r.json()["error"]["message"]
    health.check()


def test_a_6mb_body_is_tokenised_off_the_event_loop(client, health, engine, monkeypatch):
    """The server hands tokenising (engine.submit) to a worker thread: on the event loop's thread a
    6 MB prompt would hold every other request, /health included, until it was done."""
    where = []
    submit = engine.submit

    def recording_submit(request):
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:  # no loop runs in this thread
            where.append("worker thread")
        return submit(request)

    monkeypatch.setattr(engine, "submit", recording_submit)
    r = client.post("/v1/completions", json={"prompt": "word " * (6 * 1024 * 1024 // 5), "max_tokens": 2})
    assert r.status_code == 400 and "exceeds the model context" in r.json()["error"]["message"]
    assert where == ["worker thread"]
    health.check()


def test_the_engine_actor_tokenises_off_its_event_loop(engine, monkeypatch):
    """Ray runs EngineActor's async methods on one event loop: `complete` hands tokenising to a worker
    thread there too, so one long prompt does not hold the actor's other calls."""
    from memloop.engine.serve.actor import EngineActor
    from memloop.eval.llm import LLMRequest

    from memloop.sampling import SamplingParams

    where = []
    submit = engine.submit

    def recording_submit(request):
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:
            where.append("worker thread")
        return submit(request)

    monkeypatch.setattr(engine, "submit", recording_submit)
    actor = EngineActor.__new__(EngineActor)  # the actor's methods over the shared test engine (no Ray needed)
    actor.engine = engine
    out = asyncio.run(actor.complete_many([LLMRequest(prompt="Say hi", sampling=SamplingParams(max_tokens=2))] * 2))
    assert len(out) == 2 and all(r["text"] is not None for r in out)
    assert where == ["worker thread", "worker thread"]
