"""The jitted step's inputs, typed: each step's padded arrays packed once into registered dataclass pytrees.

`jax.jit` flattens a registered dataclass into its array fields and keeps the fields marked static
(`metadata={"static": True}`) in the program's cache key, as it would static arguments: the sampler's
candidate settings (`cap`, `full`, `memloop.engine.sample.sampling.candidate_cap`) and the number of
log-probability alternatives (`logprobs`) are per batch and pick the program; the engine's own settings
(model config, attention backend, page size) stay static arguments of the step functions.

`SamplingInputs` is every row's sampler settings, packed by `pack_sampling` for both step functions;
`StepInputs` is one `engine_step` call (a prefill chunk or a decode token per row); `DecodeRunInputs`
one `engine_decode_steps` call (several decode steps of unconstrained rows).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import numpy as np
from memloop.engine.sample.sampling import SamplingParams, candidate_cap

Array = Any  # a numpy array on the host, a jax.Array (or a tracer) inside the step


def _static(**kw: Any) -> Any:
    return dataclasses.field(metadata={"static": True}, **kw)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, eq=False)
class SamplingInputs:
    """Each row's sampler settings: temperature/top_p f32 [B], top_k int32 [B], keys uint32 [B, 2] (raw
    threefry keys from the request's seed), steps int32 [B] (tokens the row has sampled so far, folded
    into its key so a seeded row draws the same tokens whatever it is batched with); `cap`/`full` static."""

    temperature: Array
    top_k: Array
    top_p: Array
    keys: Array
    steps: Array
    cap: int = _static()
    full: bool = _static()


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, eq=False)
class StepInputs:
    """One `engine_step`: tokens, positions, slot_pages, slot_offsets [B, T] (token i of row b is written at
    page slot_pages[b, i], offset slot_offsets[b, i]; padding writes the scratch page), block_tables
    [B, pages], last_index [B] (the token whose logits are sampled), the grammar bitmask [B, words];
    `logprobs` static (`memloop.engine.sample.sampling.logprob_width`: 0 computes none)."""

    tokens: Array
    positions: Array
    slot_pages: Array
    slot_offsets: Array
    block_tables: Array
    last_index: Array
    bitmask: Array
    sampling: SamplingInputs
    logprobs: int = _static(default=0)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, eq=False)
class DecodeRunInputs:
    """One `engine_decode_steps`: each row's `last` token [B] (not yet in the cache) at `positions` [B],
    its `block_tables` [B, pages] (already holding every page the run writes), `budget` [B] (the request's
    max_tokens), `stop_ids` [B, S] (-1 padded), `live` [B] (False: a padding row); `count` (a scalar, at
    most DECODE_RUN) the steps to run. `sampling.steps` is where each row's sample counter starts."""

    last: Array
    positions: Array
    block_tables: Array
    budget: Array
    stop_ids: Array
    count: Array
    live: Array
    sampling: SamplingInputs


def pack_sampling(rows: Sequence[Any], size: int, sampled: Sequence[SamplingParams], vocab_size: int) -> SamplingInputs:
    """`rows`' sequences (`memloop.engine.sched.scheduler.Sequence`) padded to `size` rows (padding is greedy);
    the static candidate settings come from `sampled`, the settings of the rows that sample a token."""
    temperature = np.zeros((size,), np.float32)
    top_k = np.zeros((size,), np.int32)
    top_p = np.ones((size,), np.float32)
    keys = np.zeros((size, 2), np.uint32)
    steps = np.zeros((size,), np.int32)
    for i, s in enumerate(rows):
        temperature[i], top_k[i], top_p[i] = s.temperature, s.top_k, s.top_p
        keys[i], steps[i] = s.key, len(s.output)  # reproducible per request, whatever it is batched with
    cap, full = candidate_cap(sampled, vocab_size)
    return SamplingInputs(temperature, top_k, top_p, keys, steps, cap, full)
