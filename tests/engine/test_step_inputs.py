"""The jitted step's typed inputs (memloop.engine.runner.step_inputs): one pytree of a step's arrays whose
static fields pick the compiled program, and each row's sampling settings packed once."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from memloop.engine.runner.step_inputs import DecodeRunInputs, SamplingInputs, StepInputs, pack_sampling
from memloop.engine.sample.sampling import MAX_LOGPROBS, SamplingParams
from memloop.engine.sched.scheduler import Sequence


def _sampling(b: int, cap: int = 0, full: bool = False, seed: int = 0) -> SamplingInputs:
    rng = np.random.default_rng(seed)
    return SamplingInputs(
        rng.random(b, np.float32),
        np.zeros(b, np.int32),
        np.ones(b, np.float32),
        np.zeros((b, 2), np.uint32),
        np.arange(b, dtype=np.int32),
        cap,
        full,
    )


def _step(b: int = 2, t: int = 4, logprobs: int = 0, **sampling) -> StepInputs:
    z = np.zeros((b, t), np.int32)
    return StepInputs(
        z + 1,
        z,
        z,
        z,
        np.zeros((b, 8), np.int32),
        np.full(b, t - 1, np.int32),
        np.full((b, 3), -1, np.int32),
        _sampling(b, **sampling),
        logprobs,
    )


def test_a_step_flattens_to_its_arrays_and_keeps_its_static_settings_in_the_tree() -> None:
    """jit sees the 12 arrays of a step as its arguments; `cap`, `full` and `logprobs` are in the tree's
    structure (the program's cache key), so arrays of new values reuse a program and a new setting does not."""
    step = _step()
    leaves, tree = jax.tree_util.tree_flatten(step)
    assert len(leaves) == 12 and all(isinstance(x, np.ndarray) for x in leaves)
    rebuilt = jax.tree_util.tree_unflatten(tree, leaves)
    assert (rebuilt.sampling.cap, rebuilt.sampling.full, rebuilt.logprobs) == (0, False, 0)
    assert jax.tree_util.tree_structure(_step(seed=5)) == tree
    for other in (_step(cap=64), _step(full=True), _step(logprobs=MAX_LOGPROBS)):
        assert jax.tree_util.tree_structure(other) != tree
    run = DecodeRunInputs(*(np.zeros(2, np.int32) for _ in range(7)), _sampling(2, cap=8))
    assert len(jax.tree_util.tree_leaves(run)) == 12


def test_sampling_is_packed_row_by_row_with_greedy_padding() -> None:
    """Each row's settings, key and sample counter land in its row; padding rows are greedy; the static
    candidate settings come from the rows that sample only (a prefill chunk's row does not)."""
    seqs = [
        Sequence(
            prompt=[1, 2],
            max_tokens=4,
            temperature=0.7,
            top_k=5,
            top_p=0.9,
            key=np.array([3, 4], np.uint32),
            output=[9, 9, 9],
        ),
        Sequence(prompt=[1], max_tokens=4, temperature=1.0, top_p=0.5, key=np.array([5, 6], np.uint32)),
    ]
    sampled = [SamplingParams(temperature=0.7, top_k=5, top_p=0.9)]
    s = pack_sampling(seqs, 4, sampled, vocab_size=1000)
    np.testing.assert_allclose(s.temperature, [0.7, 1.0, 0, 0])
    np.testing.assert_array_equal(s.top_k, [5, 0, 0, 0])
    np.testing.assert_allclose(s.top_p, [0.9, 0.5, 1, 1])
    np.testing.assert_array_equal(s.keys, [[3, 4], [5, 6], [0, 0], [0, 0]])
    np.testing.assert_array_equal(s.steps, [3, 0, 0, 0])
    assert (s.cap, s.full) == (8, False)  # top-k 5 rounds up; the second row's top-p is not sampled here
    assert (pack_sampling(seqs, 2, [], 1000).cap, pack_sampling(seqs, 2, [], 1000).full) == (0, False)


def test_the_step_compiles_once_per_static_setting_and_logprobs_leave_tokens_alone(lm) -> None:
    """On the bundled model: new array values reuse the compiled step, asking for log-probabilities
    compiles a second program, and both programs sample the same greedy tokens."""
    from memloop.engine.cache.kv_pages import init_kv_pools
    from memloop.engine.runner.step import engine_step

    cfg = lm.config
    b, t = 2, 4
    tokens = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.int32)
    positions = np.tile(np.arange(t, dtype=np.int32), (b, 1))
    slot_pages = np.array([[1] * t, [2] * t], np.int32)
    tables = np.zeros((b, 8), np.int32)
    tables[:, 0] = [1, 2]
    bitmask = np.full((b, (cfg.vocab_size + 31) // 32), -1, np.int32)
    greedy = SamplingInputs(
        np.zeros(b, np.float32),
        np.zeros(b, np.int32),
        np.ones(b, np.float32),
        np.zeros((b, 2), np.uint32),
        np.zeros(b, np.int32),
        0,
        False,
    )

    def run(inputs: StepInputs):
        cache = init_kv_pools(cfg, 5, t, jnp.float32, per_layer=lm.per_layer)  # a pool no engine test uses
        toks, lps, _ = engine_step(cfg, lm.params, cache, inputs)
        return np.asarray(toks), lps

    inputs = StepInputs(tokens, positions, slot_pages, positions, tables, np.full(b, t - 1, np.int32), bitmask, greedy)
    before = engine_step._cache_size()
    toks, lps = run(inputs)
    assert lps is None and engine_step._cache_size() == before + 1
    again, _ = run(dataclasses.replace(inputs, tokens=tokens[::-1].copy()))
    assert engine_step._cache_size() == before + 1  # new values, same program
    np.testing.assert_array_equal(again, toks[::-1])  # each row's token is its own, whatever its place
    with_lps, lps = run(dataclasses.replace(inputs, logprobs=MAX_LOGPROBS))
    assert engine_step._cache_size() == before + 2
    np.testing.assert_array_equal(with_lps, toks)
    picked, top_ids, top_lps = (np.asarray(a) for a in lps)
    assert top_ids.shape == (b, MAX_LOGPROBS) and (top_ids[:, 0] == toks).all()  # greedy picks the most likely
    np.testing.assert_allclose(picked, top_lps[:, 0], rtol=1e-6)
