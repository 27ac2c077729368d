"""The reference decoder: `generate(lm, prompts, sampling)` on a contiguous per-sequence KV cache.

This is not a serving path. It is the plainest correct way to decode with `memloop.engine.model.decoder` -- one
contiguous cache per row, no pages, no prefix sharing, no scheduler -- and it is what the paged
serving engine (`memloop.engine.core.engine`) is checked against: greedy outputs of both must be identical, and
the model benchmark (`bench/model.py`) uses it to time the model without the serving machinery.

Shapes are padded to power-of-two buckets (batch, prompt length, cache length) so each bucket is
compiled once. Prefill runs the whole padded prompt block; decoding runs on device in a
`lax.while_loop` of up to `DECODE_CHUNK` steps per call (exits early when every row has stopped),
so the host only wakes up between chunks to check stop strings. The cache buffers are donated to
each call so XLA updates them in place. It shares `memloop.engine.model.decoder`'s pieces and
`memloop.engine.sample.sampling.sample` with the serving engine, so only the cache layout and batching differ.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
from memloop.engine.errors import RequestError
from memloop.engine.model.config import ModelConfig
from memloop.engine.model.decoder import (
    LoadedModel,
    contiguous_attention,
    decoder_layers,
    embed,
    final_logits,
    init_contiguous_cache,
    prompt_attention,
)
from memloop.engine.model.mesh import shard_cache
from memloop.engine.sample.sampling import SamplingParams, candidate_cap, next_pow2, row_arrays, sample, seed_keys

Prompt = Union[str, Sequence[dict], Sequence[int]]

DECODE_CHUNK = 64
MIN_PROMPT_BUCKET = 16


@dataclasses.dataclass(frozen=True)
class Generation:
    text: str
    token_ids: list[int]  # generated tokens, including a final stop token if one ended the output
    prompt_tokens: int
    finish_reason: str  # "stop" | "length"


def prompt_ids(lm: LoadedModel, prompt: Prompt) -> list[int]:
    """str -> raw completion text; list of {role, content} -> chat template; list of ints -> ids."""
    tok = lm.tokenizer
    if isinstance(prompt, str):
        ids = tok.prompt_ids(prompt)
    elif len(prompt) > 0 and all(isinstance(m, dict) for m in prompt):
        ids = tok.chat_ids(prompt)  # type: ignore[arg-type]
    elif all(isinstance(t, (int, np.integer)) for t in prompt):
        ids = [int(t) for t in prompt]
        if any(t < 0 or t >= lm.config.vocab_size for t in ids):
            raise RequestError(f"token ids must be in [0, {lm.config.vocab_size}).")
    else:
        raise RequestError("a prompt is a string, a list of chat messages, or a list of token ids.")
    if not ids:
        raise RequestError("the prompt is empty after tokenization; send at least one token.")
    return ids


@functools.partial(jax.jit, static_argnames=("cfg", "cap", "full"), donate_argnames=("cache",))
def prefill(
    params: Any,
    cfg: ModelConfig,
    cache: Any,
    tokens: jax.Array,
    lengths: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
    keys: jax.Array,
    cap: int,
    full: bool,
) -> tuple[jax.Array, jax.Array, Any]:
    """Encode right-padded prompts [B,T] into the cache; return (first sampled token [B], its logits, cache)."""
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    # every position 0..T-1 is written here, so attention reads this call's keys, not the whole cache
    h, cache = decoder_layers(params, cfg, embed(params, cfg, tokens), positions, cache, prompt_attention(positions))
    last = jnp.take_along_axis(h, (lengths - 1)[:, None, None], axis=1)[:, 0]
    logits = final_logits(params, cfg, last)
    first = sample(logits, temperature, top_k, top_p, keys, jnp.zeros((b,), jnp.int32), cap, full)
    return first, logits, cache


def _decode_attend(cfg: ModelConfig, positions: jax.Array, in_place: bool) -> Any:
    """Attention over the contiguous cache; with `in_place`, decode steps read it through the CPU
    kernel the serving engine decodes with (a contiguous cache [KV, B, S, hd] is a page pool of B
    pages of S slots, row b's block table [b]), where that kernel applies."""
    attend = contiguous_attention(positions)
    from memloop.engine.kernels.attention import config_supported, enabled

    if not (in_place and config_supported(cfg) and enabled()):
        return attend
    from memloop.engine.attention.paged import in_place_attend

    rows = jnp.arange(positions.shape[0], dtype=jnp.int32)[:, None]
    return in_place_attend(attend, rows, positions, rows, positions)


@functools.partial(jax.jit, static_argnames=("cfg", "cap", "full", "chunk", "in_place"), donate_argnames=("cache",))
def decode_chunk(
    params: Any,
    cfg: ModelConfig,
    cache: Any,
    last: jax.Array,
    positions: jax.Array,
    steps: jax.Array,
    done: jax.Array,
    budget: jax.Array,
    stop_ids: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
    keys: jax.Array,
    cap: int,
    full: bool,
    chunk: int = DECODE_CHUNK,
    in_place: bool = False,
):
    """Up to `chunk` decode steps. Row state: `last` token (not yet in cache) at `positions`, `steps`
    tokens generated so far, `done`, and `budget` (max tokens). Returns new tokens [B,chunk] (-1 where
    none), and the updated state. `in_place` decodes through the serving engine's CPU attention
    kernel (`_decode_attend`); the default keeps XLA's attention, the plain reference."""
    b = last.shape[0]
    out = jnp.full((b, chunk), -1, jnp.int32)

    def cond(state):
        i, _, _, _, _, done, _ = state
        return (i < chunk) & ~jnp.all(done)

    def body(state):
        i, cache, last, positions, steps, done, out = state
        pos = positions[:, None]
        h, cache = decoder_layers(
            params, cfg, embed(params, cfg, last[:, None]), pos, cache, _decode_attend(cfg, pos, in_place)
        )
        logits = final_logits(params, cfg, h[:, 0])
        nxt = sample(logits, temperature, top_k, top_p, keys, steps, cap, full)
        nxt = jnp.where(done, -1, nxt)
        out = out.at[:, i].set(nxt)
        live = ~done
        steps = steps + live.astype(jnp.int32)
        positions = positions + live.astype(jnp.int32)
        hit_stop = jnp.any(nxt[:, None] == stop_ids[None, :], axis=-1)
        done = done | hit_stop | (steps >= budget)
        last = jnp.where(live, nxt, last)
        return i + 1, cache, last, positions, steps, done, out

    state = (jnp.int32(0), cache, last, positions, steps, done, out)
    _, cache, last, positions, steps, done, out = jax.lax.while_loop(cond, body, state)
    return out, last, positions, steps, done, cache


def generate(
    lm: LoadedModel, prompts: Sequence[Prompt], sampling: SamplingParams | Sequence[SamplingParams] = SamplingParams()
) -> list[Generation]:
    """Generate for each prompt (a handful at a time; the serving engine handles many)."""
    if not prompts:
        return []
    params_list = list(sampling) if isinstance(sampling, (list, tuple)) else [sampling] * len(prompts)
    if len(params_list) != len(prompts):
        raise RequestError(f"got {len(prompts)} prompts but {len(params_list)} sampling settings.")
    cfg = lm.config
    ids = [prompt_ids(lm, p) for p in prompts]
    n = len(ids)
    for i, (x, sp) in enumerate(zip(ids, params_list)):
        if len(x) + sp.max_tokens > cfg.max_position_embeddings:
            raise RequestError(
                f"prompt {i} has {len(x)} tokens and asks for {sp.max_tokens} more, beyond the model's "
                f"context of {cfg.max_position_embeddings}; shorten the prompt or lower max_tokens."
            )
    b = next_pow2(n)
    t = max(MIN_PROMPT_BUCKET, next_pow2(max(len(x) for x in ids)))
    s = next_pow2(max(len(x) + sp.max_tokens for x, sp in zip(ids, params_list)))
    s = max(s, t)
    pad_params = params_list + [dataclasses.replace(params_list[0], max_tokens=1, stop=())] * (b - n)
    tokens = np.full((b, t), lm.tokenizer.pad_token_id, np.int32)
    lengths = np.ones((b,), np.int32)
    for i, x in enumerate(ids):
        tokens[i, : len(x)] = x
        lengths[i] = len(x)
    temps, top_k, top_p = row_arrays(pad_params)
    keys = seed_keys(pad_params)
    cap, full = candidate_cap(pad_params, cfg.vocab_size)
    default_stops = lm.tokenizer.stop_token_ids
    stop_sets = [sp.stop_token_ids if sp.stop_token_ids is not None else default_stops for sp in pad_params]
    stop_ids = np.asarray(sorted({x for s_ in stop_sets for x in s_}) or [-2], np.int32)
    stop_ids = np.pad(stop_ids, (0, next_pow2(len(stop_ids)) - len(stop_ids)), constant_values=-2)
    if any(set(s_) != set(stop_sets[0]) for s_ in stop_sets):
        raise RequestError("requests in one generate() call must share stop_token_ids; split the call.")

    cache = init_contiguous_cache(cfg, b, s, lm.dtype, per_layer=lm.per_layer)
    if lm.mesh is not None:
        cache = shard_cache(cache, cfg, lm.mesh)
    with jax.set_mesh(lm.mesh) if lm.mesh is not None else contextlib.nullcontext():
        generated, _ = _run(
            lm, cache, tokens, lengths, pad_params, params_list, n, temps, top_k, top_p, keys, cap, full, stop_ids
        )
    return _finish(lm, ids, generated, params_list, stop_ids)


def _run(lm, cache, tokens, lengths, pad_params, params_list, n, temps, top_k, top_p, keys, cap, full, stop_ids):
    cfg = lm.config
    b = tokens.shape[0]
    first, _, cache = prefill(
        lm.params, cfg, cache, jnp.asarray(tokens), jnp.asarray(lengths), temps, top_k, top_p, keys, cap=cap, full=full
    )
    first = np.asarray(first)
    budget = np.asarray([sp.max_tokens for sp in pad_params], np.int32)
    generated: list[list[int]] = [[int(first[i])] for i in range(b)]
    done = np.asarray([int(first[i]) in set(stop_ids.tolist()) or budget[i] <= 1 for i in range(b)])
    done[n:] = True
    last = first.astype(np.int32)
    positions = lengths.copy()
    steps = np.ones((b,), np.int32)
    while not done.all():
        out, last, positions, steps, done_dev, cache = decode_chunk(
            lm.params,
            cfg,
            cache,
            jnp.asarray(last),
            jnp.asarray(positions),
            jnp.asarray(steps),
            jnp.asarray(done),
            jnp.asarray(budget),
            jnp.asarray(stop_ids),
            temps,
            top_k,
            top_p,
            keys,
            cap=cap,
            full=full,
        )
        out = np.asarray(out)
        done = np.array(done_dev)
        for i in range(n):
            new = [int(x) for x in out[i] if x >= 0]
            generated[i].extend(new)
            if new and params_list[i].stop and not done[i]:
                text = lm.tokenizer.decode(generated[i])
                if any(st in text for st in params_list[i].stop):
                    done[i] = True
        last, positions, steps = np.asarray(last), np.asarray(positions), np.asarray(steps)
    return generated, done


def _finish(lm, ids, generated, params_list, stop_ids) -> list[Generation]:
    n = len(ids)
    results = []
    stop_set = set(stop_ids.tolist())
    for i in range(n):
        toks = generated[i]
        text = lm.tokenizer.decode(toks)
        reason = "stop" if (toks and toks[-1] in stop_set) else "length"
        for st in params_list[i].stop:
            cut = text.find(st)
            if cut >= 0:
                text, reason = text[:cut], "stop"
        results.append(Generation(text=text, token_ids=toks, prompt_tokens=len(ids[i]), finish_reason=reason))
    return results
