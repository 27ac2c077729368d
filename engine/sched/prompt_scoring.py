"""Prompt scoring: the log-probability of every prompt token given the tokens before it (OpenAI's
`echo` with `logprobs`, what lm-evaluation-harness's loglikelihood tasks read).

The serving step computes only the last position's logits, and the prefix cache skips cached prompt
tokens, so scoring is its own path: one plain causal forward over whole prompts (no KV cache, no
pages: `memloop.engine.model.decoder.no_cache_attention`), then per position the log-softmax of the raw logits, the
next prompt token's log-probability and the `width` most likely tokens. The output head runs over
the flattened positions in chunks of `HEAD_CHUNK` (`lax.map`), so the [tokens, vocabulary] logits
are never held at once.

Shapes are static buckets: prompt length to a power of two (at least `MIN_LENGTH`), rows to a power
of two with at most `TOKEN_BUDGET` padded tokens per call (a longer prompt runs alone), the width to
a power of two up to MAX_LOGPROBS; so a scoring stream compiles a handful of programs. Padding is on
the right, which a causal mask keeps out of every real position.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from memloop.engine.model.config import ModelConfig
from memloop.engine.errors import ScoringCancelled
from memloop.engine.model.decoder import decoder_layers, embed, final_logits, no_cache_attention
from memloop.engine.sample.sampling import MAX_LOGPROBS
from memloop.engine.sched.token_pieces import TokenPieces

MIN_LENGTH = 16
TOKEN_BUDGET = 4096  # padded tokens per scoring call (hidden states and attention scores scale with it)
HEAD_CHUNK = 256  # positions per output-head chunk: [HEAD_CHUNK, vocabulary] float32 logits at a time


def _pow2(n: int, minimum: int = 1) -> int:
    n = max(n, minimum)
    return 1 << (n - 1).bit_length()


@functools.partial(jax.jit, static_argnames=("cfg", "width"))
def score_tokens(params: Any, cfg: ModelConfig, tokens: jax.Array,
                 width: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Right-padded prompts [B,T] -> (log-probability of token t+1 at position t [B,T], the `width`
    most likely token ids [B,T,width] and their log-probabilities [B,T,width]), all under
    log_softmax of the raw logits at position t. The last position scores the padding: ignore it."""
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    h, _ = decoder_layers(params, cfg, embed(params, cfg, tokens), positions, None, no_cache_attention(positions))
    nxt = jnp.concatenate([tokens[:, 1:], jnp.zeros((b, 1), tokens.dtype)], axis=1)
    chunk = min(HEAD_CHUNK, b * t)
    hs = h.reshape(b * t // chunk, chunk, h.shape[-1])
    ns = nxt.reshape(b * t // chunk, chunk)

    def head(xs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
        hc, nc = xs
        logp = jax.nn.log_softmax(final_logits(params, cfg, hc).astype(jnp.float32), axis=-1)
        picked = jnp.take_along_axis(logp, nc[:, None].astype(jnp.int32), axis=-1)[:, 0]
        top_lp, top_ids = jax.lax.top_k(logp, max(width, 1))
        return picked, top_ids.astype(jnp.int32), top_lp

    picked, top_ids, top_lp = jax.lax.map(head, (hs, ns))
    k = max(width, 1)
    return picked.reshape(b, t), top_ids.reshape(b, t, k)[..., :width], top_lp.reshape(b, t, k)[..., :width]


def batches(lengths: Sequence[int], budget: int = TOKEN_BUDGET) -> list[list[int]]:
    """Indices of prompts grouped into scoring calls: longest first, each call's rows padded to its
    longest prompt's bucket, at most `budget` padded tokens per call (a longer prompt alone)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    for i in order:
        if out and _pow2(len(out[-1]) + 1) * _pow2(lengths[out[-1][0]], MIN_LENGTH) <= budget:
            out[-1].append(i)
        else:
            out.append([i])
    return out


class PromptScorer:
    """Scores prompts of token ids against one loaded model; calls are serialised (one at a time)."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self._pieces: TokenPieces | None = None
        self._lock = threading.Lock()
        self.shapes: set[tuple[int, int, int]] = set()

    @property
    def pieces(self) -> TokenPieces:
        if self._pieces is None:
            self._pieces = TokenPieces(self.lm.tokenizer.hf)
        return self._pieces

    def score(self, prompts: Sequence[Sequence[int]], top_n: int,
              stop: threading.Event | None = None) -> list[list[dict[str, Any]]]:
        """Per prompt, one entry per token {id, token, bytes, logprob, text_offset, top_logprobs} as
        `TokenPieces.entries` builds them, with the first token's `logprob` and `top_logprobs` None
        (nothing precedes it); `top_logprobs` holds the `top_n` most likely tokens, most likely first.
        Once `stop` is set (the request was abandoned) no further scoring call starts: ScoringCancelled."""
        if not 0 <= top_n <= MAX_LOGPROBS:
            raise ValueError(f"top_n must be in [0, {MAX_LOGPROBS}], got {top_n}")
        width = 0 if top_n == 0 else min(_pow2(top_n), MAX_LOGPROBS)
        out: list[list[dict[str, Any]] | None] = [None] * len(prompts)
        with self._lock:
            for group in batches([len(p) for p in prompts]):
                if stop is not None and stop.is_set():  # between calls: a call in progress cannot be cut
                    raise ScoringCancelled("the scoring request was abandoned; its remaining prompts were not scored")
                t = _pow2(len(prompts[group[0]]), MIN_LENGTH)
                rows = np.zeros((_pow2(len(group)), t), np.int32)
                for r, i in enumerate(group):
                    rows[r, :len(prompts[i])] = prompts[i]
                self.shapes.add((*rows.shape, width))
                picked, top_ids, top_lp = (np.asarray(a) for a in
                                           score_tokens(self.lm.params, self.lm.config, jnp.asarray(rows), width))
                for r, i in enumerate(group):
                    out[i] = self._entries(list(prompts[i]), picked[r], top_ids[r], top_lp[r], top_n)
        if stop is not None and stop.is_set():  # finished after its request was abandoned: nobody reads it
            raise ScoringCancelled("the scoring request was abandoned; its result was dropped")
        return out  # type: ignore[return-value]

    def _entries(self, ids: list[int], picked: np.ndarray, top_ids: np.ndarray, top_lp: np.ndarray,
                 top_n: int) -> list[dict[str, Any]]:
        # Position t's numbers score token t+1: token i's come from position i-1.
        scored = [(0.0, [])] + [(float(picked[i - 1]), list(zip(top_ids[i - 1, :top_n].tolist(),
                                                                   top_lp[i - 1, :top_n].tolist())))
                                for i in range(1, len(ids))]
        entries = self.pieces.entries(ids, scored)
        entries[0]["logprob"] = None
        entries[0]["top_logprobs"] = None
        return entries
