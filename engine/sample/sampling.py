"""Token sampling for a batch whose rows carry their own settings: greedy, temperature, top-k, top-p.

Each row has its own PRNG key (from its request's seed) folded with its own step counter, so a
seeded request draws the same tokens whatever else shares its batch. Greedy rows are plain argmax.

Top-k/top-p work on a static number of candidates (`candidate_cap`, a power of two over the largest
top-k in the batch) taken with `lax.top_k`, which is far cheaper than sorting the vocabulary every
step; only a row asking for top-p without top-k forces the full sort (cap = vocabulary size).

Log-probabilities (`token_logprobs`) are those of the model's own next-token distribution, the
log-softmax of the raw logits before the grammar mask, temperature, top-k and top-p (vLLM's default
`raw_logprobs`, and what OpenAI reports): the same numbers whatever the sampling settings.

A row's settings are a `memloop.sampling.SamplingParams`, the one sampling type of every layer, which owns
the bounds; this module packs them into the step's arrays.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from memloop.engine.errors import SamplingRequestError

from memloop.sampling import MAX_LOGPROBS, SamplingError, SamplingParams


def request_params(sampling: Any, vocab_size: int | None = None) -> SamplingParams:
    """A request's `sampling` (a dict, None, or the SamplingParams a typed request carries) as the engine
    runs it: the engine's intake and `memloop serve` parse with this, before admission, so a value the step
    cannot represent fails its own request (a RequestError: HTTP 400) and never a batch. The message is
    `memloop.sampling.check`'s, the one every layer reports."""
    try:
        return SamplingParams.from_request(sampling, vocab_size)
    except SamplingError as exc:
        raise SamplingRequestError(str(exc)) from exc


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def candidate_cap(params: Sequence[SamplingParams], vocab_size: int) -> tuple[int, bool]:
    """(static candidate count for top-k/top-p rows, whether any row samples the full vocabulary)."""
    cap, full = 0, False
    for p in params:
        if p.greedy:
            continue
        if p.top_k > 0:
            cap = max(cap, min(vocab_size, next_pow2(p.top_k)))
        elif p.top_p < 1.0:
            cap = vocab_size
        else:
            full = True
    return cap, full


def logprob_width(params: Sequence[SamplingParams]) -> int:
    """Static number of alternatives the step computes: 0 (no log-probabilities at all) unless a row
    asks for them, then MAX_LOGPROBS (one program whatever N each row asked for)."""
    return MAX_LOGPROBS if any(p.logprobs is not None for p in params) else 0


def token_logprobs(logits: jax.Array, chosen: jax.Array, width: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(log-probability of `chosen` [B], the `width` most likely token ids [B,width] and their
    log-probabilities [B,width], most likely first) under log_softmax(logits) of each row.
    Row-wise only, so a row's numbers do not depend on what else is in its batch."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logp, chosen[:, None].astype(jnp.int32), axis=-1)[:, 0]
    top_lp, top_ids = jax.lax.top_k(logp, width)
    return picked, top_ids.astype(jnp.int32), top_lp


def seed_keys(params: Sequence[SamplingParams], rng: np.random.Generator | None = None) -> np.ndarray:
    """One raw uint32[2] PRNG key per row; unseeded rows get a fresh random seed."""
    rng = rng or np.random.default_rng()
    seeds = [p.seed if p.seed is not None else int(rng.integers(0, 2**31 - 1)) for p in params]
    return np.stack([np.asarray(jax.random.key_data(jax.random.key(s))) for s in seeds]).astype(np.uint32)


def row_arrays(params: Sequence[SamplingParams]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    temps = np.asarray([p.temperature for p in params], np.float32)
    top_k = np.asarray([p.top_k for p in params], np.int32)
    top_p = np.asarray([p.top_p for p in params], np.float32)
    return temps, top_k, top_p


# What a row whose logits hold NaN or infinity samples instead of a token (argmax would pick the first
# NaN, token 0, and the request would end as an empty answer): the step runner fails that request.
NONFINITE = -2


# Vocabulary blocks of the two-pass argmax (measured on (1 and 32) x 49152 logits: 128-512 level).
ARGMAX_BLOCK = 256


def first_argmax(x: jax.Array) -> jax.Array:
    """`jnp.argmax(x, axis=-1)` as int32, bit for bit (the first index of the largest value; the first
    NaN where there is one), in two passes: each block's max, then argmax over the blocks and within
    the first block holding the row's max. XLA:CPU lowers a plain argmax over a vocabulary to a
    (value, index) reduction that runs 90x slower than a max (0.63 ms at 1 x 49152, 12.4 ms at 32 x
    49152 on an AVX-512 core, against 14 us and 0.8 ms this way): at batch 32 it was a fifth of a
    decode step. The pad (where the vocabulary is not whole blocks) is -inf, which never comes first."""
    v = x.shape[-1]
    if v <= 2 * ARGMAX_BLOCK:
        return jnp.argmax(x, axis=-1).astype(jnp.int32)
    nb = -(-v // ARGMAX_BLOCK)
    if nb * ARGMAX_BLOCK != v:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, nb * ARGMAX_BLOCK - v)], constant_values=-jnp.inf)
    xb = x.reshape(*x.shape[:-1], nb, ARGMAX_BLOCK)
    # a block's max is NaN where the block holds one (XLA:CPU's vector max does not propagate NaN)
    peak = jnp.where(jnp.any(jnp.isnan(xb), axis=-1), jnp.nan, jnp.max(xb, axis=-1))
    block = jnp.argmax(peak, axis=-1)
    inner = jnp.argmax(jnp.take_along_axis(xb, block[..., None, None], axis=-2)[..., 0, :], axis=-1)
    return (block * ARGMAX_BLOCK + inner).astype(jnp.int32)


def sample(
    logits: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
    keys: jax.Array,
    steps: jax.Array,
    cap: int,
    full: bool,
) -> jax.Array:
    """Next token per row. logits [B,V] f32; temperature/top_p f32 [B]; top_k int32 [B];
    keys uint32 [B,2] (raw threefry keys); steps int32 [B]; cap/full static (see candidate_cap)."""
    logits = logits.astype(jnp.float32)
    greedy_tok = first_argmax(logits)
    if cap == 0 and not full:
        return greedy_tok
    step_keys = jax.vmap(lambda k, s: jax.random.fold_in(jax.random.wrap_key_data(k), s))(keys, steps)
    scaled = logits / jnp.maximum(temperature, 1e-6)[:, None]
    choice = greedy_tok
    if full:
        g = jax.vmap(lambda k: jax.random.gumbel(k, (logits.shape[-1],)))(step_keys)
        full_tok = first_argmax(scaled + g)
        use_full = (top_k == 0) & (top_p >= 1.0)
        choice = jnp.where(use_full, full_tok, choice)
    if cap > 0:
        vals, idx = jax.lax.top_k(scaled, cap)  # sorted descending
        rank = jnp.arange(cap)[None, :]
        keep = (top_k[:, None] == 0) | (rank < top_k[:, None])
        vals = jnp.where(keep, vals, -jnp.inf)
        probs = jax.nn.softmax(vals, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each candidate
        keep = keep & ((before < top_p[:, None]) | (rank == 0))
        vals = jnp.where(keep, vals, -jnp.inf)
        sub = jax.vmap(lambda k: jax.random.fold_in(k, 1))(step_keys)
        g = jax.vmap(lambda k: jax.random.gumbel(k, (cap,)))(sub)
        pick = jnp.argmax(vals + g, axis=-1)
        cand_tok = jnp.take_along_axis(idx, pick[:, None], axis=-1)[:, 0].astype(jnp.int32)
        use_cand = (top_k > 0) | (top_p < 1.0)
        choice = jnp.where(use_cand, cand_tok, choice)
    return jnp.where(temperature > 0.0, choice, greedy_tok)
