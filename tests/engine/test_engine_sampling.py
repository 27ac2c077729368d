"""The batched sampler on synthetic logits: filters, seeds, and the distribution it draws from."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.errors import RequestError
from engine.sampling import SamplingParams, candidate_cap, row_arrays, sample, seed_keys

V = 64


def _draw(params: list[SamplingParams], logits: np.ndarray, steps: int) -> np.ndarray:
    """tokens[steps, B] for the same logits at consecutive step counters."""
    temps, top_k, top_p = row_arrays(params)
    keys = jnp.asarray(seed_keys(params))
    cap, full = candidate_cap(params, V)
    fn = jax.jit(jax.vmap(lambda s: sample(jnp.asarray(logits), temps, top_k, top_p, keys,
                                           jnp.full((len(params),), s, jnp.int32), cap, full)))
    return np.asarray(fn(jnp.arange(steps, dtype=jnp.int32)))


@pytest.fixture(scope="module")
def logits():
    rng = np.random.default_rng(0)
    return rng.normal(size=(1, V)).astype(np.float32) * 2


def test_greedy_is_argmax(logits):
    out = _draw([SamplingParams()], logits, 5)
    assert (out == logits.argmax()).all()


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
    rows = [SamplingParams(), SamplingParams(temperature=1.0, top_k=1, seed=1),
            SamplingParams(temperature=1.0, top_k=2, seed=2)]
    out = _draw(rows, np.repeat(logits, 3, 0), 200)
    best2 = set(np.argsort(-logits[0])[:2].tolist())
    assert (out[:, 0] == logits.argmax()).all() and (out[:, 1] == logits.argmax()).all()
    assert set(out[:, 2].tolist()) == best2


def test_candidate_cap():
    assert candidate_cap([SamplingParams()], V) == (0, False)
    assert candidate_cap([SamplingParams(temperature=0.8, top_k=40)], 49152) == (64, False)
    assert candidate_cap([SamplingParams(temperature=0.8, top_p=0.9)], 49152) == (49152, False)
    assert candidate_cap([SamplingParams(temperature=0.8)], 49152) == (0, True)


@pytest.mark.parametrize("bad", [dict(max_tokens=0), dict(temperature=-1.0), dict(top_k=-2), dict(top_p=0.0),
                                 dict(top_p=1.5), dict(stop=("",))])
def test_bad_settings_are_named(bad):
    with pytest.raises(RequestError):
        SamplingParams(**bad)
