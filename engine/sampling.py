"""Token sampling for a batch whose rows carry their own settings: greedy, temperature, top-k, top-p.

Each row has its own PRNG key (from its request's seed) folded with its own step counter, so a
seeded request draws the same tokens whatever else shares its batch. Greedy rows are plain argmax.

Top-k/top-p work on a static number of candidates (`candidate_cap`, a power of two over the largest
top-k in the batch) taken with `lax.top_k`, which is far cheaper than sorting the vocabulary every
step; only a row asking for top-p without top-k forces the full sort (cap = vocabulary size).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from engine.errors import RequestError


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """temperature 0 = greedy; top_k 0 and top_p 1 disable those filters; seed None = fresh randomness.

    `stop_token_ids=None` uses the tokenizer's end-of-turn tokens; `stop` strings end the output at
    their first occurrence (the string itself is not returned).
    """

    max_tokens: int = 256
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise RequestError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if not (self.temperature >= 0.0 and np.isfinite(self.temperature)):
            raise RequestError(f"temperature must be a finite number >= 0, got {self.temperature}.")
        if self.top_k < 0:
            raise RequestError(f"top_k must be >= 0 (0 disables it), got {self.top_k}.")
        if not (0.0 < self.top_p <= 1.0):
            raise RequestError(f"top_p must be in (0, 1], got {self.top_p}.")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise RequestError(f"stop strings must be non-empty strings, got {self.stop!r}.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


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


def sample(logits: jax.Array, temperature: jax.Array, top_k: jax.Array, top_p: jax.Array,
           keys: jax.Array, steps: jax.Array, cap: int, full: bool) -> jax.Array:
    """Next token per row. logits [B,V] f32; temperature/top_p f32 [B]; top_k int32 [B];
    keys uint32 [B,2] (raw threefry keys); steps int32 [B]; cap/full static (see candidate_cap)."""
    logits = logits.astype(jnp.float32)
    greedy_tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    if cap == 0 and not full:
        return greedy_tok
    step_keys = jax.vmap(lambda k, s: jax.random.fold_in(jax.random.wrap_key_data(k), s))(keys, steps)
    scaled = logits / jnp.maximum(temperature, 1e-6)[:, None]
    choice = greedy_tok
    if full:
        g = jax.vmap(lambda k: jax.random.gumbel(k, (logits.shape[-1],)))(step_keys)
        full_tok = jnp.argmax(scaled + g, axis=-1).astype(jnp.int32)
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
