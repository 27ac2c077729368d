"""The batched sampler on synthetic logits: filters, seeds, and the distribution it draws from."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from memloop.engine.errors import RequestError
from memloop.engine.sample.sampling import (
    ARGMAX_BLOCK,
    SamplingParams,
    candidate_cap,
    first_argmax,
    request_params,
    row_arrays,
    sample,
    seed_keys,
)

from memloop.sampling import SamplingError

V = 64


def _draw(params: list[SamplingParams], logits: np.ndarray, steps: int) -> np.ndarray:
    """tokens[steps, B] for the same logits at consecutive step counters."""
    temps, top_k, top_p = row_arrays(params)
    keys = jnp.asarray(seed_keys(params))
    cap, full = candidate_cap(params, V)
    fn = jax.jit(
        jax.vmap(
            lambda s: sample(
                jnp.asarray(logits), temps, top_k, top_p, keys, jnp.full((len(params),), s, jnp.int32), cap, full
            )
        )
    )
    return np.asarray(fn(jnp.arange(steps, dtype=jnp.int32)))


@pytest.fixture(scope="module")
def logits():
    rng = np.random.default_rng(0)
    return rng.normal(size=(1, V)).astype(np.float32) * 2


def test_greedy_is_argmax(logits):
    out = _draw([SamplingParams()], logits, 5)
    assert (out == logits.argmax()).all()


@pytest.mark.parametrize("vocab", [ARGMAX_BLOCK * 2, ARGMAX_BLOCK * 3, ARGMAX_BLOCK * 3 + 17, 49152])
def test_two_pass_argmax_is_argmax_with_ties_infinities_and_nans(vocab):
    """first_argmax (the sampler's greedy pick) gives jnp.argmax's index on every row: the first of
    tied maxima, also across blocks, +inf, rows of -inf only, and the first NaN where there is one."""
    rng = np.random.default_rng(vocab)
    rows = [rng.normal(size=vocab)]
    tied = rng.integers(-3, 3, size=vocab).astype(np.float64)  # many exact ties, in several blocks
    rows.append(tied)
    late = np.full(vocab, -1.0)
    late[[vocab - 1, vocab - 2]] = 5.0  # the max in the last (padded) block only
    rows.append(late)
    rows.append(np.full(vocab, -np.inf))
    inf = rng.normal(size=vocab)
    inf[[ARGMAX_BLOCK + 3, 7 * vocab // 8]] = np.inf
    rows.append(inf)
    nan = rng.normal(size=vocab)
    nan[[vocab // 2, vocab // 3, 5]] = [np.nan, np.nan, np.inf]
    rows.append(nan)
    x = np.stack(rows).astype(np.float32)
    want = np.asarray(jnp.argmax(jnp.asarray(x), axis=-1))
    got = np.asarray(jax.jit(first_argmax)(jnp.asarray(x)))
    assert got.dtype == np.int32
    assert got.tolist() == want.tolist()
    assert want.tolist()[2:] == [vocab - 2, 0, ARGMAX_BLOCK + 3, vocab // 3]  # the cases above are what they say


def test_top_k_restricts_to_k_best(logits):
    out = _draw([SamplingParams(temperature=1.5, top_k=3, seed=1)], logits, 400)
    allowed = set(np.argsort(-logits[0])[:3].tolist())
    assert set(out[:, 0].tolist()) == allowed  # all three appear, nothing else


def test_top_p_keeps_the_smallest_nucleus(logits):
    probs = np.exp(logits[0] - logits[0].max())
    probs /= probs.sum()
    order = np.argsort(-probs)
    cum = np.cumsum(probs[order])
    nucleus = set(order[: int(np.searchsorted(cum, 0.6) + 1)].tolist())
    out = _draw([SamplingParams(temperature=1.0, top_p=0.6, seed=2)], logits, 400)
    assert set(out[:, 0].tolist()) <= nucleus and len(set(out[:, 0].tolist())) == len(nucleus)


def test_full_vocabulary_sampling_follows_softmax(logits):
    temp = 2.0
    out = _draw([SamplingParams(temperature=temp, seed=3)], logits, 4000)[:, 0]
    p = np.exp(logits[0] / temp - (logits[0] / temp).max())
    p /= p.sum()
    freq = np.bincount(out, minlength=V) / len(out)
    assert np.abs(freq - p).max() < 0.03  # 4000 draws: binomial std <= 0.008


def test_seed_reproducible_and_independent_of_batch(logits):
    a = SamplingParams(temperature=0.8, top_k=40, seed=7)
    alone = _draw([a], logits, 50)[:, 0]
    batch = _draw([SamplingParams(temperature=1.0, seed=9), a, SamplingParams()], np.repeat(logits, 3, 0), 50)
    assert (alone == batch[:, 1]).all()
    other = _draw([SamplingParams(temperature=0.8, top_k=40, seed=8)], logits, 50)[:, 0]
    assert (alone != other).any()


def test_mixed_rows_keep_their_own_settings(logits):
    rows = [
        SamplingParams(),
        SamplingParams(temperature=1.0, top_k=1, seed=1),
        SamplingParams(temperature=1.0, top_k=2, seed=2),
    ]
    out = _draw(rows, np.repeat(logits, 3, 0), 200)
    best2 = set(np.argsort(-logits[0])[:2].tolist())
    assert (out[:, 0] == logits.argmax()).all() and (out[:, 1] == logits.argmax()).all()
    assert set(out[:, 2].tolist()) == best2


def test_candidate_cap():
    assert candidate_cap([SamplingParams()], V) == (0, False)
    assert candidate_cap([SamplingParams(temperature=0.8, top_k=40)], 49152) == (64, False)
    assert candidate_cap([SamplingParams(temperature=0.8, top_p=0.9)], 49152) == (49152, False)
    assert candidate_cap([SamplingParams(temperature=0.8)], 49152) == (0, True)


def test_candidate_cap_is_the_next_power_of_two_of_top_k_within_the_vocabulary():
    from memloop.engine.sample.sampling import next_pow2

    assert [next_pow2(n) for n in (0, 1, 2, 3, 4, 5, 63, 64, 65)] == [1, 1, 2, 4, 4, 8, 64, 64, 128]
    rows = [SamplingParams(temperature=0.8, top_k=k) for k in (5, 64)]
    assert candidate_cap(rows, 49152) == (64, False)  # the largest row's, a power of two exactly
    assert candidate_cap(rows[:1], 49152) == (8, False)
    assert candidate_cap(rows, 50) == (50, False)  # never more than the vocabulary
    mixed = [SamplingParams(), SamplingParams(temperature=0.8, top_k=3), SamplingParams(temperature=0.8)]
    assert candidate_cap(mixed, 49152) == (4, True)  # a greedy row, then a top-k and a full-vocabulary one
    assert candidate_cap([SamplingParams(temperature=0.8, top_k=1)], 49152) == (1, False)  # top-1 is top-k


@pytest.mark.parametrize(
    "bad",
    [dict(max_tokens=0), dict(temperature=-1.0), dict(top_k=-2), dict(top_p=0.0), dict(top_p=1.5), dict(stop=("",))],
)
def test_bad_settings_are_named(bad):
    with pytest.raises(SamplingError, match=next(iter(bad))):
        SamplingParams(**bad)


# -- the one parser of request sampling: every accepted value runs through the step -----------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from memloop.sampling import DEFAULT_MAX_TOKENS  # noqa: E402
from memloop.sampling import FIELDS as SAMPLING_FIELDS

VOCAB = 49152  # the bundled model's vocabulary: candidate caps as large as the real step's


def test_from_request_defaults_and_forms():
    assert SamplingParams.from_request(None) == SamplingParams.from_request({}) == SamplingParams()
    assert SamplingParams().max_tokens == DEFAULT_MAX_TOKENS
    p = SamplingParams.from_request(
        {
            "max_tokens": 7,
            "temperature": 1,
            "top_k": 3,
            "top_p": 0.5,
            "seed": -4,
            "stop": "END",
            "stop_token_ids": [0, 2],
        }
    )
    assert p == SamplingParams(
        max_tokens=7, temperature=1.0, top_k=3, top_p=0.5, seed=-4, stop=("END",), stop_token_ids=(0, 2)
    )
    assert SamplingParams.from_request({"seed": None, "stop": None}).seed is None  # None = the default


@pytest.mark.parametrize(
    "bad",
    [
        {"top_k": 2**31},
        {"top_k": 2**64},
        {"seed": 2**63},
        {"seed": -(2**63) - 1},
        {"max_tokens": 2**31},
        {"max_tokens": 0},
        {"max_tokens": True},
        {"max_tokens": 3.0},
        {"max_tokens": "3"},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"temperature": 10**400},
        {"temperature": 1e6},
        {"temperature": -0.5},
        {"top_p": float("nan")},
        {"top_p": 0},
        {"top_p": 1.0001},
        {"top_p": "0.5"},
        {"stop": ["x"] * 17},
        {"stop": ["x" * 1001]},
        {"stop": [""]},
        {"stop": [3]},
        {"stop": 3},
        {"stop_token_ids": [-1]},
        {"stop_token_ids": [2**31]},
        {"stop_token_ids": "2"},
        {"stop_token_ids": [VOCAB]},
        {"max_tokens": 10**5000},
        {"frequency_penalty": 0.1},
        ["max_tokens"],
        "greedy",
        {"logprobs": -1},
        {"logprobs": 21},
        {"logprobs": True},
        {"logprobs": 2.0},
        {"logprobs": "3"},
    ],
)
def test_from_request_rejects_what_the_step_cannot_represent(bad):
    with pytest.raises(RequestError) as err:
        request_params(bad, vocab_size=VOCAB)
    assert len(str(err.value)) < 300 and "\n" not in str(err.value)


_any_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 2),
    st.text(max_size=5),
)
_field_values = {
    "max_tokens": st.one_of(_any_scalar, st.integers(-3, 40)),
    "temperature": st.one_of(_any_scalar, st.floats(0, 150)),
    "top_k": st.one_of(_any_scalar, st.integers(-3, 2**31 + 3), st.integers(0, VOCAB + 5)),
    "top_p": st.one_of(_any_scalar, st.floats(-0.5, 1.5)),
    "seed": st.one_of(_any_scalar, st.integers(-(2**63) - 2, 2**63 + 2)),
    "stop": st.one_of(_any_scalar, st.lists(st.text(max_size=4), max_size=20)),
    "stop_token_ids": st.one_of(_any_scalar, st.lists(st.integers(-2, VOCAB + 2), max_size=4)),
    "logprobs": st.one_of(_any_scalar, st.integers(-2, 25)),
}
_sampling_dicts = st.fixed_dictionaries({}, optional=_field_values)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_sampling_dicts)
def test_accepted_settings_run_through_the_sampler(d):
    """Whatever `request_params` accepts, the jitted sampler can run (no overflow, no error, a real token);
    whatever it rejects is a RequestError (never another exception)."""
    assert set(d) <= set(SAMPLING_FIELDS)
    try:
        p = request_params(d, vocab_size=VOCAB)
    except RequestError:
        return
    logits = np.random.default_rng(0).normal(size=(2, VOCAB)).astype(np.float32)
    logits[1, ::2] = -np.inf  # a masked row, as constrained decoding leaves it
    rows = [p, p]
    temps, top_k, top_p = row_arrays(rows)
    cap, full = candidate_cap(rows, VOCAB)
    out = np.asarray(
        _sample_jit(
            jnp.asarray(logits),
            temps,
            top_k,
            top_p,
            jnp.asarray(seed_keys(rows)),
            jnp.asarray([0, 2**31 - 1], jnp.int32),
            cap,
            full,
        )
    )
    assert ((0 <= out) & (out < VOCAB)).all()
    assert out[1] % 2 == 1  # never a masked token


_sample_jit = jax.jit(sample, static_argnums=(6, 7))


# -- log-probabilities: the model's own distribution, whatever the sampling settings -------------------

from memloop.engine.sample.sampling import MAX_LOGPROBS, logprob_width, token_logprobs  # noqa: E402


def test_logprobs_setting_is_parsed_and_bounded():
    assert SamplingParams.from_request({}).logprobs is None
    assert SamplingParams.from_request({"logprobs": 0}).logprobs == 0
    assert SamplingParams.from_request({"logprobs": MAX_LOGPROBS}).logprobs == MAX_LOGPROBS
    with pytest.raises(RequestError, match="logprobs"):
        request_params({"logprobs": MAX_LOGPROBS + 1})
    with pytest.raises(SamplingError, match="logprobs"):
        SamplingParams(logprobs=-1)


def test_logprob_width_is_zero_unless_a_row_asks():
    assert logprob_width([SamplingParams(), SamplingParams(temperature=1.0)]) == 0
    assert logprob_width([SamplingParams(), SamplingParams(logprobs=0)]) == MAX_LOGPROBS


def test_token_logprobs_are_the_log_softmax_of_the_raw_logits():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(3, VOCAB)).astype(np.float32) * 3
    chosen = np.asarray([7, int(logits[1].argmax()), 0], np.int32)
    picked, ids, lps = (
        np.asarray(a) for a in jax.jit(token_logprobs, static_argnums=2)(jnp.asarray(logits), jnp.asarray(chosen), 5)
    )
    x = logits.astype(np.float64)
    ref = x - x.max(-1, keepdims=True)
    ref -= np.log(np.exp(ref).sum(-1, keepdims=True))
    np.testing.assert_allclose(picked, ref[np.arange(3), chosen], atol=1e-4)
    np.testing.assert_array_equal(ids, np.argsort(-ref, axis=-1)[:, :5])
    np.testing.assert_allclose(lps, np.take_along_axis(ref, ids, -1), atol=1e-4)
    assert (np.diff(lps, axis=-1) <= 0).all() and picked[1] == lps[1, 0]  # the argmax is the top one
