"""The step runner: executes one scheduler plan on the device and turns sampled tokens into results.

For each batch of a plan (one per prefill length bucket, then the decode batch) it packs the rows'
tokens, pages and sampling settings into the step's typed inputs (`memloop.engine.runner.step_inputs`;
the sampling settings once, `pack_sampling`, for either step function), runs the jitted
`memloop.engine.runner.step.engine_step` (forward + grammar mask + sampling, and the log-probabilities
when a row asks for them), and
accepts each row's token: grammar state, stop tokens and strings, `max_tokens`, detokenising and
the result dict.

A failure is charged to the request that caused it, never to its batch: when a batch raises, it is
run again in halves until the failing rows are alone (bisection; the KV cache is untouched by a
failed call, and rewriting a row's keys/values is idempotent), and only those rows' requests fail,
with a `StepError`. Every other row gets exactly the token it would have got. Only a failure that
loses the engine's own device state (the donated KV cache) is engine-wide: `EngineFailure`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from memloop.engine.attention.pallas import IN_PLACE, AttentionBackend
from memloop.engine.cache.kv_cache import PagePool
from memloop.engine.cache.radix import RadixCache
from memloop.engine.errors import EngineError, EngineFailure, NonFiniteLogitsError, StepError
from memloop.engine.runner.step_inputs import DecodeRunInputs, StepInputs, pack_sampling
from memloop.engine.runner.token_pieces import TokenPieces
from memloop.engine.sample.sampling import NONFINITE, logprob_width
from memloop.engine.sched.scheduler import PrefillChunk, Scheduler, Sequence, Status, StepPlan

log = logging.getLogger(__name__)

COUNTERS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "decoded_tokens",
    "computed_prompt_tokens",
    "steps",
    "constrained_requests",
    "failed_requests",
    "cancelled_requests",
    "scored_prompts",
    "scored_tokens",
)
# Where the engine thread's wall time goes (seconds): device steps of already compiled shapes; calls
# that compiled a new shape (compile plus that one step); everything else while there is work
# (scheduling, packing a step's arrays, grammar bitmasks, accepting tokens, detokenising); waiting
# for work. They add up to the engine thread's time since start or the last counter reset.
TIMERS = ("compute_s", "compile_s", "host_s", "idle_s")


def prefill_groups(chunks: list[Any]) -> list[list[Any]]:
    """Prompt chunks batched into one step per length bucket: the rows of a step are padded to its
    longest chunk, so grouping by power-of-two length keeps padding under 2x while a step of many
    loops' new chunks runs as one batched forward instead of one forward per sequence."""
    groups: dict[int, list[Any]] = {}
    for chunk in chunks:
        groups.setdefault(bucket(chunk.length), []).append(chunk)
    return [groups[k] for k in sorted(groups, reverse=True)]


def bucket(n: int, minimum: int = 1) -> int:
    """Next power of two >= n (static shapes: one compiled program per bucket)."""
    n = max(n, minimum)
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class Row:
    """One sequence's share of a batch: compute tokens [start, start + length); sample after them?"""

    seq: Sequence
    start: int
    length: int
    sample: bool
    chunk: PrefillChunk | None = None  # None: a decode row


class StepRunner:
    """Owns the model's device state (parameters, paged KV cache) and runs plans against it.

    `lock` guards the scheduler and the counters (requests join from other threads); it is held
    while accepting tokens, never during the device step.
    """

    def __init__(
        self,
        lm: Any,
        pool: PagePool,
        tree: RadixCache | None,
        scheduler: Scheduler,
        lock: threading.Condition,
        stop_ids: frozenset[int],
        grammar: Callable[[], Any],
        attention: AttentionBackend = IN_PLACE,
        kv_dtype: Any = None,
    ) -> None:
        self.lm = lm
        self.cfg = lm.config
        self.params = lm.params
        self.mesh = lm.mesh
        self.tokenizer = lm.tokenizer
        self._pieces: TokenPieces | None = None  # built on the first request asking for log-probabilities
        self.pool = pool
        self.tree = tree
        self.scheduler = scheduler
        self.lock = lock
        self.stop_ids = stop_ids
        self.grammar = grammar
        self.attention = attention  # the decode-attention backend, a static argument of the step
        self.kv_dtype = jnp.dtype(kv_dtype if kv_dtype is not None else lm.dtype)
        self.counters: dict[str, float] = {**dict.fromkeys(COUNTERS, 0), **dict.fromkeys(TIMERS, 0.0)}
        self.shapes: set[tuple[int, ...]] = set()
        self.cache = self._new_cache()

    def _new_cache(self) -> Any:
        from memloop.engine.cache.kv_pages import init_kv_pools

        cache = init_kv_pools(
            self.cfg, self.pool.num_pages, self.pool.page_size, self.kv_dtype, per_layer=self.lm.per_layer
        )
        if self.mesh is not None:  # pages split on KV heads across the mesh, like the model's own cache
            from memloop.engine.model.mesh import shard_cache

            cache = shard_cache(cache, self.cfg, self.mesh)
        return cache

    # -- a plan --------------------------------------------------------------------------------------
    def execute(self, plan: StepPlan) -> None:
        """Run every batch of `plan`; raises only `EngineFailure` (engine-wide)."""
        for group in prefill_groups(plan.prefill):
            self.run_rows([Row(c.seq, c.start, c.length, c.final and not c.seq.output, c) for c in group])
        steps = 1
        if plan.decode:
            run = self.decode_run(plan)
            if run > 1:
                steps = self.run_decode_steps(plan.decode, run)
            else:
                self.run_rows([Row(s, len(s.tokens) - 1, 1, True) for s in plan.decode])
        with self.lock:
            self.counters["steps"] += steps

    def decode_run(self, plan: StepPlan) -> int:
        """How many decode steps the plan's rows can take in one device call (1: a single step).

        Several when the step decodes only, nobody waits for admission (a new request joins at most
        DECODE_RUN steps later otherwise), and every row's rules are the device's own (no grammar, no
        stop strings, which the host checks per token, no log-probabilities): as many as every row has
        tokens left and slots in the pages it already holds, so the page accounting is unchanged."""
        from memloop.engine.runner.step import DECODE_RUN

        if plan.prefill or self.scheduler.waiting:
            return 1
        run = DECODE_RUN
        for s in plan.decode:
            if s.constraint is not None or s.stop_strings or s.logprobs is not None:
                return 1
            run = min(run, len(s.pages) * self.pool.page_size - len(s.tokens) + 1, s.max_tokens - len(s.output))
        return max(run, 1)

    def run_decode_steps(self, seqs: list[Sequence], run: int) -> int:
        """Up to `run` decode steps of `seqs` in one call; returns the steps the device took. A failure
        falls back to one step at a time, which isolates a failing request (`run_rows`)."""
        from memloop.engine.runner.step import engine_decode_steps

        b = bucket(len(seqs))
        npg = bucket(max(len(s.pages) for s in seqs), 8)
        width = max(1, max(len(s.stop_ids) for s in seqs))
        last = np.zeros((b,), np.int32)
        positions = np.zeros((b,), np.int32)
        tables = np.zeros((b, npg), np.int32)
        budget = np.zeros((b,), np.int32)
        stop_ids = np.full((b, bucket(width)), -1, np.int32)
        live = np.zeros((b,), bool)
        for i, s in enumerate(seqs):
            n = len(s.prompt) + len(s.output)
            last[i], positions[i] = s.tokens[-1], n - 1
            tables[i, : len(s.pages)] = s.pages
            budget[i] = s.max_tokens
            stop_ids[i, : len(s.stop_ids)] = sorted(s.stop_ids)
            live[i] = True
        sampling = pack_sampling(seqs, b, [s.params for s in seqs], self.cfg.vocab_size)
        inputs = DecodeRunInputs(last, positions, tables, budget, stop_ids, np.int32(run), live, sampling)
        compiled = engine_decode_steps._cache_size()
        start = time.perf_counter()
        try:
            with jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext():
                out, self.cache = engine_decode_steps(
                    self.cfg, self.params, self.cache, inputs, self.pool.page_size, self.attention
                )
            toks = np.asarray(out)[: len(seqs)]  # waits for the device
        except Exception as exc:
            self.raise_if_cache_lost(exc)
            log.info("a run of %d decode steps failed (%s); stepping one token at a time", run, type(exc).__name__)
            self.run_rows([Row(s, len(s.tokens) - 1, 1, True) for s in seqs])
            return 1
        with self.lock:
            self.counters["compile_s" if engine_decode_steps._cache_size() > compiled else "compute_s"] += (
                time.perf_counter() - start
            )
            self.shapes.add(("decode_run", b, npg, sampling.cap, sampling.full))
            for s, row in zip(seqs, toks):
                for tok in row:
                    if tok == -1 or s.status is Status.FINISHED:  # no token (NONFINITE fails in `accept`)
                        break
                    try:
                        self.accept_row(Row(s, len(s.tokens) - 1, 1, True), int(tok))
                    except Exception as exc:  # e.g. detokenising fails: this request only
                        self.fail(
                            s,
                            exc
                            if isinstance(exc, EngineError)
                            else StepError(
                                f"this request failed after its step ({type(exc).__name__}: {exc}); the requests "
                                "batched with it were not affected."
                            ),
                        )
                        break
        return int(max((row >= 0).sum() for row in toks))

    def run_rows(self, rows: list[Row]) -> None:
        """One batch; if it raises, bisect it so that only the failing rows' requests fail."""
        try:
            toks, logprobs = self.forward(rows)
        except Exception as exc:
            self.raise_if_cache_lost(exc)
            if len(rows) == 1:
                log.warning("request failed inside the engine step: %s: %s", type(exc).__name__, exc)
                with self.lock:
                    self.fail(
                        rows[0].seq,
                        StepError(
                            f"this request failed inside the engine step ({type(exc).__name__}: {exc}); the requests "
                            "batched with it were not affected. Check its settings against the documented ranges."
                        ),
                    )
                return
            log.info(
                "a step of %d rows failed (%s); running it in halves to find the failing request",
                len(rows),
                type(exc).__name__,
            )
            half = len(rows) // 2
            self.run_rows(rows[:half])
            self.run_rows(rows[half:])
            return
        with self.lock:
            for i, (row, tok) in enumerate(zip(rows, toks)):
                try:
                    if row.sample and row.seq.logprobs is not None and logprobs is not None:
                        picked, top_ids, top_lps = (a[i] for a in logprobs)
                        n = row.seq.logprobs
                        row.seq.token_logprobs.append(
                            (float(picked), [(int(t), float(lp)) for t, lp in zip(top_ids[:n], top_lps[:n])])
                        )
                    self.accept_row(row, int(tok))
                except Exception as exc:  # e.g. a grammar that breaks on the token: this request only
                    err = (
                        exc
                        if isinstance(exc, EngineError)
                        else StepError(
                            f"this request failed after its step ({type(exc).__name__}: {exc}); the requests batched "
                            "with it were not affected."
                        )
                    )
                    self.fail(row.seq, err)

    def cache_lost(self) -> bool:
        """The donated KV cache was consumed by a call that then failed (the engine cannot go on)."""
        return any(getattr(x, "is_deleted", lambda: False)() for x in jax.tree_util.tree_leaves(self.cache))

    def raise_if_cache_lost(self, exc: Exception) -> None:
        """After a failed step: an EngineFailure (every pending request aborted) if it took the KV cache."""
        if self.cache_lost():
            raise EngineFailure(
                f"the engine's KV cache was lost in a failed step ({type(exc).__name__}: {exc}); "
                "every pending request was aborted, send them again"
            ) from exc

    def reset_cache(self) -> None:
        """Fresh KV pools after an engine-wide failure; the prefix cache's pages no longer hold their keys."""
        if self.tree is not None:
            self.tree.clear()
        self.cache = self._new_cache()

    # -- the device step -----------------------------------------------------------------------------
    def forward(self, rows: list[Row]) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
        """One jitted step over `rows`, computing tokens [start, start + length) of each: a token per row,
        and (chosen log-probability, top ids, top log-probabilities) per row when a sampling row asks."""
        from memloop.engine.runner.step import engine_step

        ps = self.pool.page_size
        b = bucket(len(rows))
        t = bucket(max(r.length for r in rows))
        npg = bucket(max(len(r.seq.pages) for r in rows), 8)
        tokens = np.zeros((b, t), np.int32)
        positions = np.zeros((b, t), np.int32)
        slot_pages = np.zeros((b, t), np.int32)  # padding writes the scratch page
        slot_offsets = np.zeros((b, t), np.int32)
        tables = np.zeros((b, npg), np.int32)
        last = np.zeros((b,), np.int32)
        constraints: list[Any] = [None] * b
        for i, row in enumerate(rows):
            s, start, n = row.seq, row.start, row.length
            pos = np.arange(start, start + n)
            tokens[i, :n] = s.tokens[start : start + n]
            positions[i, :n] = pos
            pages = np.asarray(s.pages, np.int32)
            slot_pages[i, :n] = pages[pos // ps]
            slot_offsets[i, :n] = pos % ps
            tables[i, : len(s.pages)] = pages
            last[i] = n - 1
            if row.sample and s.constraint is not None:
                constraints[i] = s.constraint
        if any(c is not None for c in constraints):
            grammar = self.grammar()
            bitmask = np.empty((b, grammar.words), np.int32)
            grammar.fill(constraints, bitmask)
        else:
            bitmask = np.full((b, (self.cfg.vocab_size + 31) // 32), -1, np.int32)
        sampled = [r.seq.params for r in rows if r.sample]
        sampling = pack_sampling([r.seq for r in rows], b, sampled, self.cfg.vocab_size)
        inputs = StepInputs(
            tokens, positions, slot_pages, slot_offsets, tables, last, bitmask, sampling, logprob_width(sampled)
        )
        compiled = engine_step._cache_size()
        start = time.perf_counter()
        with jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext():
            out, lps, self.cache = engine_step(self.cfg, self.params, self.cache, inputs, self.attention)
        toks = np.asarray(out)[: len(rows)]  # waits for the device
        logprobs = None if lps is None else tuple(np.asarray(a)[: len(rows)] for a in lps)
        with self.lock:  # a call that added a program to the step's cache compiled it (or loaded it from disk)
            self.counters["compile_s" if engine_step._cache_size() > compiled else "compute_s"] += (
                time.perf_counter() - start
            )
        self.shapes.add((b, t, npg, sampling.cap, sampling.full, inputs.logprobs))
        return toks, logprobs

    # -- tokens -> results (under the lock) ------------------------------------------------------------
    def accept_row(self, row: Row, tok: int) -> None:
        """Record the row's computed keys/values and, if it sampled, its token."""
        if row.chunk is not None:
            chunk = row.chunk
            self.scheduler.prefilled(chunk)
            self.counters["computed_prompt_tokens"] += max(
                0, min(chunk.start + chunk.length, len(chunk.seq.prompt)) - chunk.start
            )
        else:
            self.scheduler.decoded(row.seq)
        if row.sample:
            self.accept(row.seq, tok)

    def accept(self, seq: Sequence, tok: int) -> None:
        """Append a sampled token and finish the sequence when it is done."""
        if tok == NONFINITE:
            raise NonFiniteLogitsError(
                f"the model's logits for this request hold NaN or infinity (at output token "
                f"{len(seq.output) + 1}); its activations overflow: run the model in float32, or check "
                "the weights against a reference"
            )
        seq.output.append(tok)
        reason = None
        if tok in seq.stop_ids:
            reason = "stop"
        else:
            if seq.constraint is not None:
                seq.constraint.consume(tok)  # a RequestError fails this request only (run_rows)
                if seq.constraint.done:
                    reason = "stop"
            if reason is None and seq.stop_strings:
                text = self.tokenizer.decode(seq.output)
                if any(x in text for x in seq.stop_strings):
                    reason = "stop"
            if reason is None and len(seq.output) >= seq.max_tokens:
                reason = "length"
        if reason is not None:
            self.finish(seq, reason)
        elif seq.on_token is not None:  # streamed: the last token's text comes with the result
            seq.on_token(tok, seq.token_logprobs[-1] if seq.logprobs is not None else None)

    def finish(self, seq: Sequence, reason: str) -> None:
        self.scheduler.finish(seq, reason)
        ids = [t for t in seq.output if t not in seq.stop_ids]
        text = self.tokenizer.decode(ids)
        stopped_at = None
        for x in seq.stop_strings:
            cut = text.find(x)
            if cut >= 0:
                text = text[:cut]
                stopped_at = cut
        usage = {
            "prompt_tokens": len(seq.prompt),
            "cached_tokens": seq.cached_tokens or 0,
            "decoded_tokens": len(seq.output),
        }
        self.counters["requests"] += 1
        self.counters["prompt_tokens"] += usage["prompt_tokens"]
        self.counters["cached_tokens"] += usage["cached_tokens"]
        self.counters["decoded_tokens"] += usage["decoded_tokens"]
        if seq.constraint is not None:
            self.counters["constrained_requests"] += 1
        result = {"text": text, "usage": usage, "finish_reason": reason}
        if seq.logprobs is not None:
            result["logprobs"], result["trailing_logprobs"] = self.logprob_entries(seq, stopped_at, len(text))
        seq.handle.set_result(result)

    def logprob_entries(
        self, seq: Sequence, stopped_at: int | None, text_len: int
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every output token with its log-probability (`memloop.engine.runner.token_pieces`), split in two:
        the returned text's tokens, and the ones after them that the text leaves out (a stop token,
        only ever the last; the tokens starting after a stop string's cut), whose `text_offset` is the
        text's end. Echo needs both (one entry per generated token, as vLLM returns); the rest only the first."""
        if self._pieces is None:
            self._pieces = TokenPieces(self.tokenizer.hf)
        entries = self._pieces.entries(seq.output, seq.token_logprobs)
        kept = 0
        for e in entries:
            if e["id"] in seq.stop_ids or (stopped_at is not None and e["text_offset"] >= stopped_at):
                break
            kept += 1
        return entries[:kept], [{**e, "text_offset": text_len} for e in entries[kept:]]

    def fail(self, seq: Sequence, exc: BaseException) -> None:
        """End one request with `exc`; its pages go back (the fully computed ones to the prefix cache)."""
        if seq in self.scheduler.running:
            self.scheduler.finish(seq, "error")
        self.counters["failed_requests"] += 1
        if not seq.handle.done():
            seq.handle.set_exception(exc)
