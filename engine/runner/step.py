"""One jitted engine step: a Llama forward pass that reads and writes a paged KV cache, then samples.

The step takes a padded [batch, tokens] block of new tokens (decode rows have one token, a prefill
row a chunk of its prompt), writes their keys/values into their pages, gathers each row's pages
through its block table, attends, and samples the next token of every row with per-row settings and
the grammar bitmask applied -- all inside one XLA program, compiled once per power-of-two bucket.

It runs over the stacked parameter layout of `memloop.engine.model.weights` (every per-layer tensor carries a
leading layer axis) through the model's own `decoder_layers`/`final_logits`, plugging in the paged
attention hook of `memloop.engine.attention.paged` (`paged_attend`). Calls go through a kernel that reads
the pages in place instead, chosen by the static `attention` backend (`memloop.engine.attention.pallas`):
memloop's C++ kernel on CPU (`in_place_attend`: decode steps and prefill chunks), JAX's Pallas
paged-attention kernel on TPU/GPU (decode steps).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from memloop.engine.attention.paged import in_place_attend, paged_attend
from memloop.engine.attention.pallas import IN_PLACE, AttentionBackend, kernel_attend
from memloop.engine.kernels.attention import config_supported as kernel_config_supported
from memloop.engine.kernels.attention import enabled as kernel_enabled
from memloop.engine.model.config import ModelConfig
from memloop.engine.model.decoder import decoder_layers, embed, final_logits
from memloop.engine.runner.step_inputs import DecodeRunInputs, SamplingInputs, StepInputs
from memloop.engine.sample.constrained import unpack_bitmask
from memloop.engine.sample.sampling import NONFINITE, sample, token_logprobs


def forward_paged(
    cfg: ModelConfig,
    params: dict[str, Any],
    cache: dict[str, jax.Array],
    tokens: jax.Array,
    positions: jax.Array,
    slot_pages: jax.Array,
    slot_offsets: jax.Array,
    block_tables: jax.Array,
    last_index: jax.Array,
    attention: AttentionBackend = IN_PLACE,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The model's own layers over the paged cache; logits [B, V] of each row's `last_index` token."""
    attend = paged_attend(slot_pages, slot_offsets, block_tables, positions)
    if attention.kernel:  # decode calls through the Pallas kernel, every other call gathers
        attend = kernel_attend(attend, attention, slot_pages, slot_offsets, block_tables, positions)
    elif attention.in_place and kernel_config_supported(cfg) and kernel_enabled():
        # decode steps and prefill chunks through the CPU kernel where the layer allows it
        attend = in_place_attend(attend, slot_pages, slot_offsets, block_tables, positions)
    h, cache = decoder_layers(params, cfg, embed(params, cfg, tokens), positions, cache, attend)
    last = jnp.take_along_axis(h, last_index[:, None, None], axis=1)[:, 0]  # [B, D]
    return final_logits(params, cfg, last), cache


def masked_sample(logits: jax.Array, bitmask: jax.Array, sampling: SamplingInputs) -> jax.Array:
    """The grammar bitmask applied to the whole batch, then the model's per-row sampler; NONFINITE for
    a row whose raw logits are not all finite."""
    finite = jnp.all(jnp.isfinite(logits), axis=-1)
    logits = jnp.where(unpack_bitmask(bitmask, logits.shape[-1]), logits, -jnp.inf)
    s = sampling
    return jnp.where(finite, sample(logits, s.temperature, s.top_k, s.top_p, s.keys, s.steps, s.cap, s.full), NONFINITE)


@partial(jax.jit, static_argnums=(0, 4), donate_argnums=(2,))
def engine_step(
    cfg: ModelConfig,
    params: dict[str, Any],
    cache: dict[str, jax.Array],
    inputs: StepInputs,
    attention: AttentionBackend = IN_PLACE,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array] | None, dict[str, jax.Array]]:
    """Forward + sample in one program; the KV cache is donated and updated in place.

    Returns (tokens [B], log-probabilities or None, cache). `inputs` holds the step's arrays and its
    static per-batch settings (`memloop.engine.runner.step_inputs.StepInputs`: the sampler's candidate
    settings, the number of log-probability alternatives); `attention` is the static attention backend
    (`memloop.engine.attention.pallas.resolve_backend`; the default is what `auto` is on CPU). With
    `inputs.logprobs` 0 no log-probabilities are computed, otherwise each row's chosen token's
    log-probability and the top `logprobs` ids and log-probabilities come back, from the raw logits
    (before the grammar mask and the sampler's settings). They only read the logits, so the sampled
    tokens are the same either way.
    """
    x = inputs
    logits, cache = forward_paged(
        cfg, params, cache, x.tokens, x.positions, x.slot_pages, x.slot_offsets, x.block_tables, x.last_index, attention
    )
    toks = masked_sample(logits, x.bitmask, x.sampling)
    return toks, token_logprobs(logits, toks, x.logprobs) if x.logprobs else None, cache


# Decode steps one `engine_decode_steps` call runs at most (the width of its token output).
DECODE_RUN = 16


@partial(jax.jit, static_argnums=(0, 4, 5), donate_argnums=(2,))
def engine_decode_steps(
    cfg: ModelConfig,
    params: dict[str, Any],
    cache: dict[str, jax.Array],
    inputs: DecodeRunInputs,
    page_size: int,
    attention: AttentionBackend = IN_PLACE,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Up to `inputs.count` (a scalar, at most DECODE_RUN) decode steps of unconstrained rows in one call
    (a `lax.while_loop` around the very step `engine_step` runs on a [B, 1] batch), so the host pays one
    dispatch and one token hand-off for several tokens. Row state (`memloop.engine.runner.step_inputs.
    DecodeRunInputs`): the `last` token (not yet in the cache) at `positions`, its `block_tables`
    (already holding every page the steps write), `sampling.steps` tokens sampled so far (the sampler's
    per-row counter), `budget` (the request's max_tokens), `stop_ids` [B, S] (-1 padded). A row stops
    after a stop token or its budget; `live` False marks padding rows. From then on it writes the
    scratch page 0. Returns tokens [B, DECODE_RUN] (-1 where a row made none) and the cache; the loop
    ends early when every row has stopped."""
    x = inputs
    b, width = x.last.shape[0], DECODE_RUN
    out = jnp.full((b, width), -1, jnp.int32)
    last_index = jnp.zeros((b,), jnp.int32)
    unmasked = jnp.full((b, (cfg.vocab_size + 31) // 32), -1, jnp.int32)

    def cond(state):
        i, _, _, _, _, done, _ = state
        return (i < x.count) & ~jnp.all(done)

    def body(state):
        i, cache, last, pos, steps, done, out = state
        page = jnp.take_along_axis(x.block_tables, (pos // page_size)[:, None], axis=1)[:, 0]
        slot_pages = jnp.where(done, 0, page)[:, None]
        slot_offsets = (pos % page_size)[:, None]
        logits, cache = forward_paged(
            cfg,
            params,
            cache,
            last[:, None],
            pos[:, None],
            slot_pages,
            slot_offsets,
            x.block_tables,
            last_index,
            attention,
        )
        nxt = masked_sample(logits, unmasked, dataclasses.replace(x.sampling, steps=steps))
        nxt = jnp.where(done, -1, nxt)
        out = out.at[:, i].set(nxt)
        going = ~done
        steps = steps + going.astype(jnp.int32)
        pos = pos + going.astype(jnp.int32)
        done = done | jnp.any(nxt[:, None] == x.stop_ids, axis=-1) | (steps >= x.budget) | (nxt == NONFINITE)
        last = jnp.where(going, nxt, last)
        return i + 1, cache, last, pos, steps, done, out

    state = (jnp.int32(0), cache, x.last, x.positions, x.sampling.steps, ~x.live, out)
    _, cache, _, _, _, _, out = jax.lax.while_loop(cond, body, state)
    return out, cache
