"""The serving engine: submit requests from any thread, one background loop runs batched steps.

Request and result are plain dicts with the field names of the LLM protocol (`eval.llm`), which the
engine does not import:

    request: {"messages": [...]} or {"prompt": "..."}, "sampling": {max_tokens, temperature, top_k,
             top_p, seed, stop, stop_token_ids} (see `SamplingParams.from_request`), "json_schema": {...} | None
    result:  {"text", "usage": {prompt_tokens, cached_tokens, decoded_tokens}, "finish_reason"}

`cached_tokens` counts the prompt tokens whose keys/values came from the prefix cache instead of
being computed; `decoded_tokens` counts every sampled token, the terminating one included.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from engine.errors import EngineError, RequestError
from engine.kv_cache import KVLayout, PagePool, check_fits, pages_for_budget
from engine.radix import RadixCache
from engine.sampling import SamplingParams, candidate_cap, seed_keys
from engine.scheduler import PrefillChunk, Scheduler, Sequence, Status

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineConfig:
    """What the engine is built with (the Ray actor and `memloop serve` take the same fields).

    kv_budget: bytes for the paged KV cache (> 1), or a fraction of device memory (<= 1).
    num_pages: overrides kv_budget with an exact page count (tests of memory pressure).
    """

    model: str | None = None
    dtype: str | None = None
    kv_budget: float = 1 << 30
    num_pages: int | None = None
    page_size: int = 16
    max_batch: int = 32
    prefill_chunk: int = 512
    prefix_cache: bool = True
    max_context: int | None = None
    tp: int | None = None  # tensor-parallel devices (a 1-D `tp` mesh); None = one device

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "EngineConfig":
        d = dict(d or {})
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise EngineError(f"unknown engine setting(s) {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


class Engine:
    """One model, one paged KV cache, one prefix cache, one step loop."""

    def __init__(self, config: EngineConfig | None = None, model: Any = None) -> None:
        from engine.model import load_model

        self.config = config = config or EngineConfig()
        self.mesh = None
        if model is None and config.tp:
            from engine.mesh import make_mesh

            self.mesh = make_mesh(config.tp)
        self.lm = model if model is not None else load_model(config.model, dtype=config.dtype, mesh=self.mesh)
        self.mesh = self.lm.mesh
        self.cfg = self.lm.config
        self.tokenizer = self.lm.tokenizer
        self.params = self.lm.params
        kv_dtype = jnp.dtype(self.lm.dtype)
        layout = KVLayout(self.cfg.num_layers, self.cfg.num_kv_heads, self.cfg.head_dim, config.page_size,
                          kv_dtype.itemsize)
        num_pages = config.num_pages or pages_for_budget(layout, config.kv_budget)
        self.pool = PagePool(num_pages, config.page_size)
        self.tree = RadixCache(self.pool) if config.prefix_cache else None
        self.scheduler = Scheduler(self.pool, self.tree, config.max_batch, config.prefill_chunk)
        self.max_context = min(config.max_context or self.cfg.max_position_embeddings, self.cfg.max_position_embeddings)
        self.stop_ids = frozenset(self.tokenizer.stop_token_ids)

        from engine.paged import init_kv_pools

        self.cache = init_kv_pools(self.cfg, num_pages, config.page_size, kv_dtype, per_layer=self.lm.per_layer)
        if self.mesh is not None:  # pages split on KV heads across the mesh, like the model's own cache
            from engine.mesh import shard_cache

            self.cache = shard_cache(self.cache, self.cfg, self.mesh)
        self._grammar: Any = None
        self._grammar_lock = threading.Lock()
        self._cond = threading.Condition()
        self._stopped = False
        self._error: BaseException | None = None
        self._cancelled: set[Future] = set()
        self.counters = {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0, "decoded_tokens": 0,
                         "computed_prompt_tokens": 0, "steps": 0, "constrained_requests": 0,
                         "failed_requests": 0, "cancelled_requests": 0}
        self._shapes: set[tuple[int, ...]] = set()
        self._thread = threading.Thread(target=self._loop, name="memloop-engine", daemon=True)
        self._thread.start()

    # -- requests -----------------------------------------------------------------------------------
    @property
    def grammar(self) -> Any:
        """The grammar compiler, built on the first constrained request (about a second)."""
        with self._grammar_lock:
            if self._grammar is None:
                from engine.constrained import GrammarCompiler

                self._grammar = GrammarCompiler(self.tokenizer.hf, self.cfg.vocab_size, sorted(self.stop_ids))
            return self._grammar

    def count_tokens(self, text: str) -> int:
        return self.tokenizer.count_tokens(text)

    def prompt_ids(self, request: dict[str, Any]) -> list[int]:
        messages, prompt = request.get("messages"), request.get("prompt")
        if (messages is None) == (prompt is None):
            raise RequestError("a request needs exactly one of `messages` (chat) or `prompt` (completion)")
        if prompt is not None:
            if not isinstance(prompt, str):
                raise RequestError("`prompt` must be a string")
            return self.tokenizer.encode(prompt)
        if not isinstance(messages, (list, tuple)) or not messages:
            raise RequestError("`messages` must be a non-empty list of {role, content} objects")
        return self.tokenizer.chat_ids(list(messages))

    def make_sequence(self, request: dict[str, Any]) -> Sequence:
        """Validate and tokenize a request dict (raises RequestError, never truncates)."""
        if not isinstance(request, dict):
            raise RequestError("a request must be a JSON object")
        params = SamplingParams.from_request(request.get("sampling"), self.cfg.vocab_size)
        ids = self.prompt_ids(request)
        check_fits(len(ids), params.max_tokens, self.pool, self.max_context)
        schema = request.get("json_schema")
        constraint = self.grammar.compile(schema) if schema is not None else None
        return Sequence(prompt=ids, max_tokens=params.max_tokens, temperature=params.temperature,
                        top_k=params.top_k, top_p=params.top_p, params=params, key=seed_keys([params])[0],
                        stop_ids=self.stop_ids if params.stop_token_ids is None else frozenset(params.stop_token_ids),
                        stop_strings=params.stop, constraint=constraint)

    def submit(self, request: dict[str, Any]) -> Future:
        """Queue a request; the future resolves to the result dict (or raises RequestError)."""
        fut: Future = Future()
        fut.set_running_or_notify_cancel()  # only `cancel` below stops a request, between two steps
        try:
            seq = self.make_sequence(request)
        except EngineError as exc:
            fut.set_exception(exc)
            return fut
        seq.handle = fut
        with self._cond:
            if self._stopped:
                raise EngineError("the engine is shut down; create a new one")
            self.scheduler.add(seq)
            self._cond.notify()
        return fut

    def cancel(self, fut: Future) -> None:
        """Drop the request behind `fut` (its client went away) at the next step boundary."""
        with self._cond:
            if not fut.done():
                self._cancelled.add(fut)
                self._cond.notify()

    def _drop_cancelled(self) -> None:
        """Take cancelled requests out of the batch and the queue (called under the lock, between steps)."""
        for seq in [s for s in [*self.scheduler.running, *self.scheduler.waiting] if s.handle in self._cancelled]:
            if seq in self.scheduler.running:
                self.scheduler.finish(seq, "cancelled")
            else:
                self.scheduler.waiting.remove(seq)
            self.counters["cancelled_requests"] += 1
            seq.handle.set_exception(RequestError("the request was cancelled"))
        self._cancelled.clear()

    def complete(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        return self.submit(request).result(timeout)

    def complete_many(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        futs = [self.submit(r) for r in requests]
        return [f.result() for f in futs]

    def health(self) -> bool:
        return self._thread.is_alive() and not self._stopped

    def stats(self) -> dict[str, Any]:
        with self._cond:
            out = dict(self.counters)
            out.update(running=len(self.scheduler.running), waiting=len(self.scheduler.waiting),
                       preemptions=self.scheduler.preemptions,
                       backpressure_steps=self.scheduler.backpressure, free_pages=self.pool.num_free,
                       total_pages=self.pool.capacity, page_size=self.pool.page_size,
                       prefix_cached_pages=self.tree.num_pages if self.tree else 0,
                       compiled_shapes=len(self._shapes), prefix_cache=self.tree is not None)
        out["cache_hit_rate"] = out["cached_tokens"] / out["prompt_tokens"] if out["prompt_tokens"] else 0.0
        return out

    def reset_counters(self) -> None:
        with self._cond:
            for k in self.counters:
                self.counters[k] = 0

    def clear_prefix_cache(self) -> None:
        with self._cond:
            if self.tree is not None:
                self.tree.clear()

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=30)

    # -- the loop ------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not self.scheduler.has_work():
                    self._cond.wait()
                if self._stopped:
                    for seq in self.scheduler.abort_all():
                        seq.handle.set_exception(EngineError("the engine was shut down before this request finished"))
                    return
                try:
                    self._drop_cancelled()
                    plan = self.scheduler.schedule()
                except Exception as exc:  # a scheduler bug must not hang every caller
                    self._fail_all(exc)
                    continue
            if not plan:
                time.sleep(0.001)
                continue
            try:
                self._execute(plan)
            except Exception as exc:
                log.exception("engine step failed")
                with self._cond:
                    self._fail_all(exc)

    def _fail_all(self, exc: BaseException) -> None:
        for seq in self.scheduler.abort_all():
            self.counters["failed_requests"] += 1
            if not seq.handle.done():
                seq.handle.set_exception(EngineError(f"engine step failed: {type(exc).__name__}: {exc}"))

    def _execute(self, plan: Any) -> None:
        for group in prefill_groups(plan.prefill):
            samples = [c.final and not c.seq.output for c in group]
            toks = self._run([c.seq for c in group], [c.start for c in group], [c.length for c in group], sample=samples)
            with self._cond:
                for chunk, tok, sampled in zip(group, toks, samples):
                    self.scheduler.prefilled(chunk)
                    self.counters["computed_prompt_tokens"] += max(0, min(chunk.start + chunk.length, len(chunk.seq.prompt)) - chunk.start)
                    if sampled:
                        self._accept(chunk.seq, int(tok))
        if plan.decode:
            seqs = plan.decode
            toks = self._run(seqs, [len(s.tokens) - 1 for s in seqs], [1] * len(seqs), sample=[True] * len(seqs))
            with self._cond:
                for seq, tok in zip(seqs, toks):
                    self.scheduler.decoded(seq)
                    self._accept(seq, int(tok))
        with self._cond:
            self.counters["steps"] += 1

    def _run(self, seqs: list[Sequence], starts: list[int], lengths: list[int], sample: list[bool]) -> np.ndarray:
        """One jitted step over rows `seqs`, computing tokens [start, start+length) of each."""
        from engine.paged import engine_step

        ps = self.pool.page_size
        b = bucket(len(seqs))
        t = bucket(max(lengths))
        npg = bucket(max(len(s.pages) for s in seqs), 8)
        tokens = np.zeros((b, t), np.int32)
        positions = np.zeros((b, t), np.int32)
        slot_pages = np.zeros((b, t), np.int32)  # padding writes the scratch page
        slot_offsets = np.zeros((b, t), np.int32)
        tables = np.zeros((b, npg), np.int32)
        last = np.zeros((b,), np.int32)
        temp = np.zeros((b,), np.float32)
        top_k = np.zeros((b,), np.int32)
        top_p = np.ones((b,), np.float32)
        keys = np.zeros((b, 2), np.uint32)
        steps = np.zeros((b,), np.int32)
        constraints: list[Any] = [None] * b
        for i, (s, start, n) in enumerate(zip(seqs, starts, lengths)):
            all_tokens = s.tokens
            pos = np.arange(start, start + n)
            tokens[i, :n] = all_tokens[start:start + n]
            positions[i, :n] = pos
            pages = np.asarray(s.pages, np.int32)
            slot_pages[i, :n] = pages[pos // ps]
            slot_offsets[i, :n] = pos % ps
            tables[i, :len(s.pages)] = pages
            last[i] = n - 1
            temp[i], top_k[i], top_p[i] = s.temperature, s.top_k, s.top_p
            keys[i], steps[i] = s.key, len(s.output)  # reproducible per request, whatever it is batched with
            if sample[i] and s.constraint is not None:
                constraints[i] = s.constraint
        if any(c is not None for c in constraints):
            bitmask = np.empty((b, self.grammar.words), np.int32)
            self.grammar.fill(constraints, bitmask)
        else:
            bitmask = np.full((b, (self.cfg.vocab_size + 31) // 32), -1, np.int32)
        cap, full = candidate_cap([s.params for s, x in zip(seqs, sample) if x], self.cfg.vocab_size)
        self._shapes.add((b, t, npg, cap, full))
        with jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext():
            out, self.cache = engine_step(self.cfg, self.params, self.cache, tokens, positions, slot_pages,
                                          slot_offsets, tables, last, bitmask, temp, top_k, top_p, keys, steps,
                                          cap, full)
        return np.asarray(out)[:len(seqs)]

    def _accept(self, seq: Sequence, tok: int) -> None:
        """Append a sampled token and finish the sequence when it is done (called under the lock)."""
        seq.output.append(tok)
        reason = None
        if tok in seq.stop_ids:
            reason = "stop"
        else:
            if seq.constraint is not None:
                try:
                    seq.constraint.consume(tok)
                except RequestError as exc:  # fail this request only, never the batch
                    self.scheduler.finish(seq, "error")
                    self.counters["failed_requests"] += 1
                    seq.handle.set_exception(exc)
                    return
                if seq.constraint.done:
                    reason = "stop"
            if reason is None and seq.stop_strings:
                text = self.tokenizer.decode(seq.output)
                if any(x in text for x in seq.stop_strings):
                    reason = "stop"
            if reason is None and len(seq.output) >= seq.max_tokens:
                reason = "length"
        if reason is not None:
            self._finish(seq, reason)

    def _finish(self, seq: Sequence, reason: str) -> None:
        self.scheduler.finish(seq, reason)
        ids = [t for t in seq.output if t not in seq.stop_ids]
        text = self.tokenizer.decode(ids)
        for x in seq.stop_strings:
            cut = text.find(x)
            if cut >= 0:
                text = text[:cut]
        usage = {"prompt_tokens": len(seq.prompt), "cached_tokens": seq.cached_tokens or 0,
                 "decoded_tokens": len(seq.output)}
        self.counters["requests"] += 1
        self.counters["prompt_tokens"] += usage["prompt_tokens"]
        self.counters["cached_tokens"] += usage["cached_tokens"]
        self.counters["decoded_tokens"] += usage["decoded_tokens"]
        if seq.constraint is not None:
            self.counters["constrained_requests"] += 1
        seq.handle.set_result({"text": text, "usage": usage, "finish_reason": reason})
