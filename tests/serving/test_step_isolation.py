"""A request that breaks an engine step fails alone; the requests batched with it finish unchanged.

Run on the bundled SmolLM2 with real steps. The broken requests are real sequences whose own state
makes the step raise: a top_k the int32 step arrays cannot hold (raises while the batch is packed,
at prefill), and a grammar constraint whose matcher goes missing after a few tokens (the mask fill
raises inside a decode step) or whose token consumption raises (after the step).
"""

from __future__ import annotations

import logging

import jax
import pytest
from memloop.engine.errors import EngineError, StepError
from memloop.engine.sample.constrained import Constraint

TOPICS = ["rivers", "planets", "birds", "tools", "fruits", "metals"]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["name", "count"],
}


def greedy(topic: str, max_tokens: int = 10) -> dict:
    return {"messages": [{"role": "user", "content": f"Name three {topic}."}], "sampling": {"max_tokens": max_tokens}}


class BreakingConstraint(Constraint):
    """A real JSON-schema constraint that breaks on its `at`-th token: `mask` loses its matcher, so
    the next step's grammar mask fill raises; `consume` raises while the token is accepted."""

    def __init__(self, real: Constraint, at: int, how: str) -> None:
        super().__init__(real._m)
        self.at, self.how, self.seen = at, how, 0

    def consume(self, token: int) -> None:
        self.seen += 1
        if self.seen == self.at:
            if self.how == "consume":
                raise RuntimeError("grammar state corrupted")
            super().consume(token)
            self._m = None  # the next mask fill gets no matcher
            return
        super().consume(token)

    @property
    def done(self) -> bool:
        return self._m is not None and super().done


@pytest.fixture(scope="module")
def eng(engine_nocache):
    """Without a prefix cache every prompt is prefilled whole, so the bad and the valid requests share
    their prefill step (one length bucket) as well as their decode steps."""
    return engine_nocache


@pytest.fixture(scope="module")
def alone(eng) -> dict[str, str]:
    """Each valid request's output when it runs alone."""
    return {t: eng.complete(greedy(t))["text"] for t in TOPICS}


def run_together(engine, bad_seq) -> tuple[list, object]:
    """Submit the valid requests and `bad_seq` so that they are planned into the same steps."""
    with engine.loop.lock:  # the loop cannot plan until every request is queued
        good = [engine.submit(greedy(t)) for t in TOPICS[:3]]
        bad = engine.submit_sequence(bad_seq)
        good += [engine.submit(greedy(t)) for t in TOPICS[3:]]
    return good, bad


def check_isolated(engine, alone, good, bad) -> None:
    assert [f.result(timeout=600)["text"] for f in good] == [alone[t] for t in TOPICS]
    with pytest.raises(StepError):
        bad.result(timeout=600)
    assert engine.health()
    stats = engine.stats()
    assert stats["running"] == 0 and stats["waiting"] == 0
    assert stats["free_pages"] + stats["prefix_cached_pages"] == stats["total_pages"]  # no page leaked
    assert engine.complete(greedy(TOPICS[0]))["text"] == alone[TOPICS[0]]  # the engine goes on


def shared_a_batch(caplog) -> bool:
    """The failing request was found by splitting a step it shared with all six valid requests."""
    return any("a step of 7 rows failed" in r.getMessage() for r in caplog.records)


def test_a_setting_the_step_cannot_hold_fails_only_its_request(eng, alone, caplog) -> None:
    engine = eng
    seq = engine.make_sequence(greedy("bridges"))
    seq.top_k = 2**31  # past int32: packing the batch raises OverflowError (prefill)
    failed = engine.stats()["failed_requests"]
    with caplog.at_level(logging.INFO, logger="memloop.engine.runner.step_runner"):
        good, bad = run_together(engine, seq)
        check_isolated(engine, alone, good, bad)
    assert "OverflowError" in str(bad.exception())
    assert engine.stats()["failed_requests"] == failed + 1
    assert shared_a_batch(caplog)
    assert any("failed inside the engine step" in r.getMessage() for r in caplog.records)


def test_a_grammar_that_breaks_mid_decode_fails_only_its_request(eng, alone, caplog) -> None:
    engine = eng
    seq = engine.make_sequence({**greedy("castles", 40), "json_schema": SCHEMA})
    seq.constraint = BreakingConstraint(seq.constraint, at=3, how="mask")
    with caplog.at_level(logging.INFO, logger="memloop.engine.runner.step_runner"):
        good, bad = run_together(engine, seq)
        check_isolated(engine, alone, good, bad)
    assert shared_a_batch(caplog)
    assert "LLMatcher" in str(bad.exception())  # the mask fill's own TypeError, inside the decode step


def test_a_grammar_that_raises_on_a_token_fails_only_its_request(eng, alone) -> None:
    engine = eng
    seq = engine.make_sequence({**greedy("ships", 40), "json_schema": SCHEMA})
    seq.constraint = BreakingConstraint(seq.constraint, at=2, how="consume")
    good, bad = run_together(engine, seq)
    check_isolated(engine, alone, good, bad)
    assert "grammar state corrupted" in str(bad.exception())


def test_a_lost_kv_cache_is_an_engine_wide_failure_and_the_engine_recovers(make_engine) -> None:
    eng = make_engine(num_pages=64, max_batch=4)
    expected = eng.complete(greedy(TOPICS[0]))["text"]
    with eng.loop.lock:
        futs = [eng.submit(greedy(t)) for t in TOPICS[:2]]
        for leaf in jax.tree_util.tree_leaves(eng.runner.cache):
            leaf.delete()  # what a failed call that consumed the donated cache leaves behind
    for f in futs:
        with pytest.raises(EngineError, match="KV cache was lost"):
            f.result(timeout=600)
    assert eng.stats()["failed_requests"] == 2
    assert eng.complete(greedy(TOPICS[0]))["text"] == expected  # fresh KV pools, empty prefix cache
