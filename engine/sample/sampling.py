"""Token sampling for a batch whose rows carry their own settings: greedy, temperature, top-k, top-p.

Each row has its own PRNG key (from its request's seed) folded with its own step counter, so a
seeded request draws the same tokens whatever else shares its batch. Greedy rows are plain argmax.

Top-k/top-p work on a static number of candidates (`candidate_cap`, a power of two over the largest
top-k in the batch) taken with `lax.top_k`, which is far cheaper than sorting the vocabulary every
step; only a row asking for top-p without top-k forces the full sort (cap = vocabulary size).

Log-probabilities (`token_logprobs`) are those of the model's own next-token distribution, the
log-softmax of the raw logits before the grammar mask, temperature, top-k and top-p (vLLM's default
`raw_logprobs`, and what OpenAI reports): the same numbers whatever the sampling settings.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from memloop.engine.errors import RequestError

# The one default of the engine for a request that does not set max_tokens.
DEFAULT_MAX_TOKENS = 512
# What the jitted step can represent: token counts, top_k and token ids are int32 on the device,
# seeds go through `jax.random.key` (a C long), temperature and top_p are float32.
INT32_MAX = 2**31 - 1
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
# Above this, sampling is uniform over the candidates to float32 precision anyway; a bound keeps
# masked (-inf) logits from meeting an infinite temperature (inf/inf = nan).
MAX_TEMPERATURE = 100.0
# Stop strings are searched in the decoded text after every token: bound that work per request.
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 1000
MAX_STOP_TOKEN_IDS = 256
# Most alternatives a request may ask log-probabilities of per token (OpenAI's and vLLM's top_logprobs
# bound); the step computes this many whenever any row of the batch asks, so one program serves them all.
MAX_LOGPROBS = 20


class _RequestSampling(BaseModel):
    """The request's `sampling` object as it arrives (strict: no bools as numbers, no strings as numbers)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_tokens: int = Field(DEFAULT_MAX_TOKENS, ge=1, le=INT32_MAX)
    temperature: float = Field(0.0, ge=0.0, le=MAX_TEMPERATURE, allow_inf_nan=False)
    top_k: int = Field(0, ge=0, le=INT32_MAX)
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    stop: list[str] = Field(default_factory=list, max_length=MAX_STOP_STRINGS)
    stop_token_ids: list[int] | None = Field(None, max_length=MAX_STOP_TOKEN_IDS)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)


SAMPLING_FIELDS = tuple(_RequestSampling.model_fields)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """temperature 0 = greedy; top_k 0 and top_p 1 disable those filters; seed None = fresh randomness.

    `stop_token_ids=None` uses the tokenizer's end-of-turn tokens; `stop` strings end the output at
    their first occurrence (the string itself is not returned). `logprobs` None returns none; N (0 to
    MAX_LOGPROBS) returns each output token's log-probability and the N most likely alternatives. Requests are parsed with
    `from_request`, which checks every field against what the jitted step can represent.
    """

    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] | None = None
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.max_tokens <= INT32_MAX:
            raise RequestError(f"max_tokens must be in [1, {INT32_MAX}], got {self.max_tokens}.")
        if not (0.0 <= self.temperature <= MAX_TEMPERATURE):  # also false for nan
            raise RequestError(f"temperature must be a number in [0, {MAX_TEMPERATURE:g}], got {self.temperature}.")
        if not 0 <= self.top_k <= INT32_MAX:
            raise RequestError(f"top_k must be in [0, {INT32_MAX}] (0 disables it), got {self.top_k}.")
        if not (0.0 < self.top_p <= 1.0):
            raise RequestError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.seed is not None and not SEED_MIN <= self.seed <= SEED_MAX:
            raise RequestError(f"seed must be an integer in [-2**63, 2**63 - 1], got {self.seed}.")
        if any(not isinstance(s, str) or not s or len(s) > MAX_STOP_CHARS for s in self.stop):
            raise RequestError(f"stop strings must be non-empty strings of at most {MAX_STOP_CHARS} characters.")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise RequestError(f"at most {MAX_STOP_STRINGS} stop strings, got {len(self.stop)}.")
        if self.stop_token_ids is not None and any(not 0 <= t <= INT32_MAX for t in self.stop_token_ids):
            raise RequestError(f"stop_token_ids must be token ids >= 0, got {list(self.stop_token_ids)[:8]}.")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise RequestError(f"logprobs must be None or in [0, {MAX_LOGPROBS}], got {self.logprobs}.")

    @classmethod
    def from_request(cls, d: Any, vocab_size: int | None = None) -> "SamplingParams":
        """Parse a request's `sampling` object (None or missing fields take the defaults).

        The one parser of request sampling settings (the engine's intake and `memloop serve` use it):
        every value is checked before admission, so a value the step cannot represent is a
        `RequestError` for its request and never fails a batch. `stop` may be one string.
        `vocab_size` bounds `stop_token_ids` when given.
        """
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise RequestError(f"`sampling` must be an object with keys among {list(SAMPLING_FIELDS)}")
        unknown = sorted(str(k) for k in d if k not in SAMPLING_FIELDS)
        if unknown:
            raise RequestError(f"unknown sampling setting(s) {unknown}; known: {list(SAMPLING_FIELDS)}")
        d = {k: v for k, v in d.items() if v is not None}
        if isinstance(d.get("stop"), str):
            d["stop"] = [d["stop"]]
        for k in ("stop", "stop_token_ids"):
            if isinstance(d.get(k), tuple):
                d[k] = list(d[k])
        try:
            r = _RequestSampling(**d)
        except pydantic.ValidationError as exc:
            e = exc.errors(include_url=False)[0]
            where = ".".join(str(x) for x in e["loc"]) or "sampling"
            raise RequestError(f"bad sampling setting {where}: {e['msg']} (got {_short(e.get('input'))})") from None
        except ValueError as exc:  # e.g. an integer of thousands of digits
            raise RequestError(f"bad sampling setting: {_short(str(exc))}") from None
        if r.stop_token_ids is not None and vocab_size is not None and any(t >= vocab_size for t in r.stop_token_ids):
            raise RequestError(f"stop_token_ids must be < the vocabulary size {vocab_size}")
        return cls(max_tokens=r.max_tokens, temperature=r.temperature, top_k=r.top_k, top_p=r.top_p,
                   seed=r.seed, stop=tuple(r.stop),
                   stop_token_ids=None if r.stop_token_ids is None else tuple(r.stop_token_ids),
                   logprobs=r.logprobs)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _short(value: Any, limit: int = 60) -> str:
    """A value for an error message, cut short (inputs can be megabytes; huge ints cannot be printed)."""
    try:
        text = repr(value)
    except ValueError:
        return "an integer of thousands of digits"
    return text if len(text) <= limit else text[:limit] + "..."


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


def sample(logits: jax.Array, temperature: jax.Array, top_k: jax.Array, top_p: jax.Array,
           keys: jax.Array, steps: jax.Array, cap: int, full: bool) -> jax.Array:
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
