"""Prompt scoring: the log-probability of every prompt token given the tokens before it (OpenAI's
`echo` with `logprobs`, what lm-evaluation-harness's loglikelihood tasks read).

The serving step computes only the last position's logits, and the prefix cache skips cached prompt
tokens, so scoring is its own path: one plain causal forward over whole prompts (no KV cache, no
pages: `memloop.engine.model.decoder.no_cache_attention`), then per position the log-softmax of the raw logits, the
next prompt token's log-probability and the `width` most likely tokens. The output head runs over
the flattened positions in chunks of `HEAD_CHUNK` (`lax.map`), so the [tokens, vocabulary] logits
are never held at once.

A call runs in stages, each waited for before the next starts: the layers `LAYER_SPANS` spans at a
time, then the head `HEAD_PART` positions at a time. Between stages an abandoned call stops
(`ScoringCancelled`, its activations dropped) and the caller hears of progress (`/health`'s stall
check), so no abandoned call runs on for the tens of seconds a long prompt takes on a CPU.

Shapes are static buckets: prompt length to a power of two (at least `MIN_LENGTH`), rows to a power
of two with at most `TOKEN_BUDGET` padded tokens per call (a longer prompt runs alone), the width to
a power of two up to MAX_LOGPROBS; so a scoring stream compiles a handful of programs. Padding is on
the right, which a causal mask keeps out of every real position.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from memloop.engine.errors import ScoringCancelled
from memloop.engine.model.config import ModelConfig
from memloop.engine.model.decoder import decoder_layers, embed, final_logits, no_cache_attention
from memloop.engine.runner.token_pieces import TokenPieces
from memloop.engine.sample.sampling import MAX_LOGPROBS

MIN_LENGTH = 16
TOKEN_BUDGET = 4096  # padded tokens per scoring call (hidden states and attention scores scale with it)
HEAD_CHUNK = 256  # positions per output-head chunk: [HEAD_CHUNK, vocabulary] float32 logits at a time
HEAD_PART = 1024  # positions per head stage (a multiple of HEAD_CHUNK)
LAYER_SPANS = 8  # layer stages per call: an abandoned call stops within about an eighth of its forward


def _pow2(n: int, minimum: int = 1) -> int:
    n = max(n, minimum)
    return 1 << (n - 1).bit_length()


def _positions(tokens: jax.Array) -> jax.Array:
    b, t = tokens.shape
    return jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))


@functools.partial(jax.jit, static_argnames=("cfg",))
def _embed(params: Any, cfg: ModelConfig, tokens: jax.Array) -> jax.Array:
    return embed(params, cfg, tokens)


def _span(params: Any, cfg: ModelConfig, h: jax.Array, tokens: jax.Array, first: Any, count: int) -> jax.Array:
    positions = _positions(tokens)
    return decoder_layers(params, cfg, h, positions, None, no_cache_attention(positions), first, count)[0]


# Per-layer weights (a Python layer loop) need `first` static; stacked ones take it traced (one program a length).
_span_static = jax.jit(_span, static_argnames=("cfg", "first", "count"))
_span_traced = jax.jit(_span, static_argnames=("cfg", "count"))


@functools.partial(jax.jit, static_argnames=("cfg", "width"))
def _head(
    params: Any, cfg: ModelConfig, h: jax.Array, nxt: jax.Array, width: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Hidden states [P, D] and the tokens after them [P] -> (their log-probabilities [P], the `width`
    most likely ids [P, width] and log-probabilities [P, width]), `HEAD_CHUNK` positions at a time."""
    chunk = min(HEAD_CHUNK, h.shape[0])

    def head(xs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
        hc, nc = xs
        logp = jax.nn.log_softmax(final_logits(params, cfg, hc).astype(jnp.float32), axis=-1)
        picked = jnp.take_along_axis(logp, nc[:, None].astype(jnp.int32), axis=-1)[:, 0]
        top_lp, top_ids = jax.lax.top_k(logp, max(width, 1))
        return picked, top_ids.astype(jnp.int32), top_lp

    picked, top_ids, top_lp = jax.lax.map(head, (h.reshape(-1, chunk, h.shape[-1]), nxt.reshape(-1, chunk)))
    k = max(width, 1)
    return picked.reshape(-1), top_ids.reshape(-1, k)[:, :width], top_lp.reshape(-1, k)[:, :width]


def score_tokens(
    params: Any, cfg: ModelConfig, tokens: jax.Array, width: int, between: Callable[[], None] = lambda: None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-padded prompts [B,T] -> (log-probability of token t+1 at position t [B,T], the `width`
    most likely token ids [B,T,width] and their log-probabilities [B,T,width]), all under
    log_softmax of the raw logits at position t. The last position scores the padding: ignore it.
    `between()` runs after each stage has finished on the device (it raises to stop the call)."""
    b, t = tokens.shape
    h = _embed(params, cfg, tokens)
    per_layer = isinstance(params["layers"], (list, tuple))
    count = math.ceil(cfg.num_layers / LAYER_SPANS)
    for first in range(0, cfg.num_layers, count):
        n = min(count, cfg.num_layers - first)
        h = (_span_static if per_layer else _span_traced)(params, cfg, h, tokens, first, n)
        h.block_until_ready()  # dispatch is asynchronous: wait, so that `between` sees the stage done
        between()
    nxt = jnp.concatenate([tokens[:, 1:], jnp.zeros((b, 1), tokens.dtype)], axis=1).reshape(-1)
    h = h.reshape(b * t, -1)
    parts = []
    for lo in range(0, b * t, HEAD_PART):
        parts.append(
            tuple(np.asarray(a) for a in _head(params, cfg, h[lo : lo + HEAD_PART], nxt[lo : lo + HEAD_PART], width))
        )
        between()
    picked, top_ids, top_lp = (np.concatenate(a) for a in zip(*parts))
    return picked.reshape(b, t), top_ids.reshape(b, t, width), top_lp.reshape(b, t, width)


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
    """Scores prompts of token ids against one loaded model, in the calling thread (`ScoringQueue`
    runs one call at a time on its own thread)."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self._pieces: TokenPieces | None = None
        self.shapes: set[tuple[int, int, int]] = set()

    @property
    def pieces(self) -> TokenPieces:
        if self._pieces is None:
            self._pieces = TokenPieces(self.lm.tokenizer.hf)
        return self._pieces

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        top_n: int,
        stop: threading.Event | None = None,
        progress: Callable[[], None] = lambda: None,
    ) -> list[list[dict[str, Any]]]:
        """Per prompt, one entry per token {id, token, bytes, logprob, text_offset, top_logprobs} as
        `TokenPieces.entries` builds them, with the first token's `logprob` and `top_logprobs` None
        (nothing precedes it); `top_logprobs` holds the `top_n` most likely tokens, most likely first.
        Once `stop` is set (the request was abandoned) the call stops at its next stage:
        ScoringCancelled. `progress()` is called after every stage."""
        if not 0 <= top_n <= MAX_LOGPROBS:
            raise ValueError(f"top_n must be in [0, {MAX_LOGPROBS}], got {top_n}")
        width = 0 if top_n == 0 else min(_pow2(top_n), MAX_LOGPROBS)

        def between() -> None:
            progress()
            if stop is not None and stop.is_set():
                raise ScoringCancelled("the scoring request was abandoned; the scorer stopped its work")

        out: list[list[dict[str, Any]] | None] = [None] * len(prompts)
        for group in batches([len(p) for p in prompts]):
            between()
            t = _pow2(len(prompts[group[0]]), MIN_LENGTH)
            rows = np.zeros((_pow2(len(group)), t), np.int32)
            for r, i in enumerate(group):
                rows[r, : len(prompts[i])] = prompts[i]
            self.shapes.add((*rows.shape, width))
            picked, top_ids, top_lp = score_tokens(self.lm.params, self.lm.config, jnp.asarray(rows), width, between)
            for r, i in enumerate(group):
                out[i] = self._entries(list(prompts[i]), picked[r], top_ids[r], top_lp[r], top_n)
        between()  # finished after its request was abandoned: nobody reads it
        return out  # type: ignore[return-value]

    def _entries(
        self, ids: list[int], picked: np.ndarray, top_ids: np.ndarray, top_lp: np.ndarray, top_n: int
    ) -> list[dict[str, Any]]:
        # Position t's numbers score token t+1: token i's come from position i-1.
        scored = [(0.0, [])] + [
            (float(picked[i - 1]), list(zip(top_ids[i - 1, :top_n].tolist(), top_lp[i - 1, :top_n].tolist())))
            for i in range(1, len(ids))
        ]
        entries = self.pieces.entries(ids, scored)
        entries[0]["logprob"] = None
        entries[0]["top_logprobs"] = None
        return entries
