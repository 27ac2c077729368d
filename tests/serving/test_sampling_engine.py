"""The request parser against a real engine step on the bundled model: every sampling setting it
accepts runs (beside other requests, in one batch) and every one it rejects is that request's own
RequestError."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memloop.engine.errors import RequestError
from memloop.engine.sample.sampling import request_params

_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 2),
    st.text(max_size=4),
)
_sampling = st.fixed_dictionaries(
    {},
    optional={
        "max_tokens": st.one_of(_scalar, st.integers(-2, 3)),
        "temperature": st.one_of(_scalar, st.floats(0, 150)),
        "top_k": st.one_of(_scalar, st.integers(-2, 2**31 + 2), st.integers(0, 50000)),
        "top_p": st.one_of(_scalar, st.floats(-0.5, 1.5)),
        "seed": st.one_of(_scalar, st.integers(-(2**63) - 2, 2**63 + 2)),
        "stop": st.one_of(_scalar, st.lists(st.text(max_size=3), max_size=18)),
        "stop_token_ids": st.one_of(_scalar, st.lists(st.integers(-2, 49154), max_size=3)),
    },
)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(_sampling)
def test_accepted_settings_run_in_a_real_step(engine, sampling: dict[str, Any]):
    try:
        p = request_params(sampling, vocab_size=engine.cfg.vocab_size)
    except RequestError:
        with pytest.raises(RequestError):
            engine.submit({"prompt": "Hi", "sampling": sampling}).result(timeout=300)
        return
    if p.max_tokens > 3:  # keep the run short; max_tokens itself is bounded by check_fits
        sampling = {**sampling, "max_tokens": 3}
    neighbour = engine.submit({"prompt": "One, two,", "sampling": {"max_tokens": 2}})
    result = engine.submit({"prompt": "Hi", "sampling": sampling}).result(timeout=300)
    assert 1 <= result["usage"]["decoded_tokens"] <= 3
    assert neighbour.result(timeout=300)["finish_reason"] in ("stop", "length")
