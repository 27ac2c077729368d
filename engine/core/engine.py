"""The serving engine: submit requests from any thread, one background loop runs batched steps.

Request and result are plain dicts with the field names of the LLM protocol (`memloop.eval.llm`), which the
engine does not import:

    request: {"messages": [...]} or {"prompt": "..." | [token ids]}, "sampling": {max_tokens, temperature, top_k,
             top_p, seed, stop, stop_token_ids, logprobs}, "json_schema": {...} | None
    result:  {"text", "usage": {prompt_tokens, cached_tokens, decoded_tokens}, "finish_reason"}
             + "logprobs" when the sampling asked for them (`logprobs: N`): one entry per token of
             the text, {id, token, bytes, logprob, text_offset, top_logprobs: [{id, token, bytes,
             logprob}] (the N most likely, most likely first)}, from the model's raw logits, and
             "trailing_logprobs": the same for the generated tokens the text leaves out (a stop
             token, the tokens after a stop string's cut), so both together hold every output token

`score(prompts, top_n)` (or `submit_score` -> Future, `cancel_score`) is the other entry point: every
prompt token's log-probability given the tokens before it (`memloop.engine.runner.prompt_scoring`, OpenAI's
`echo`), computed by a full-prompt forward outside the step loop and its KV cache, one call at a time
on the scorer's own thread (`memloop.engine.core.scoring_queue`); `scored_prompts` / `scored_tokens`
count the work delivered, `scoring_running` / `scoring_queued` the work in hand.

`problem(stall_s)` says why the engine cannot make progress (its step loop stopped or stuck, its
scorer stuck), None when it can: what the server's `/health` reports.

`stats()` adds to the counters where the engine thread's wall time (`wall_s`) went: `compute_s`
(device steps), `compile_s` (steps that compiled a new shape), `host_s` (scheduling, step
packing, grammar bitmasks, detokenising) and `idle_s` (no work), so a slow run says why.

`cached_tokens` counts the prompt tokens whose keys/values came from the prefix cache instead of
being computed; `decoded_tokens` counts every sampled token, the terminating one included.

`Engine` is the facade over three parts with one job each: `memloop.engine.core.intake` (request dict ->
`Sequence`, or a `RequestError` before any work), `memloop.engine.runner.step_runner` (a scheduler plan -> device
step -> tokens -> results; a failing request fails alone) and `memloop.engine.core.step_loop` (the thread that
plans and runs steps, futures, shutdown).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

import jax.numpy as jnp
from memloop.engine.cache.kv_cache import KVLayout, PagePool, pages_for_budget
from memloop.engine.cache.radix import RadixCache
from memloop.engine.core.intake import RequestIntake
from memloop.engine.core.scoring_queue import ScoringQueue
from memloop.engine.core.step_loop import StepLoop
from memloop.engine.engine_config import EngineConfig
from memloop.engine.errors import EngineError, RequestError
from memloop.engine.runner.prompt_scoring import PromptScorer
from memloop.engine.runner.step_runner import TIMERS, StepRunner
from memloop.engine.sched.scheduler import Scheduler, Sequence

log = logging.getLogger(__name__)


class Engine:
    """One model, one paged KV cache, one prefix cache, one step loop."""

    def __init__(self, config: EngineConfig | None = None, model: Any = None) -> None:
        from memloop.engine.attention.pallas import resolve_backend
        from memloop.engine.model.decoder import load_model

        self.config = config = config if config is not None else EngineConfig()
        if not isinstance(config, EngineConfig):
            raise EngineError("Engine takes an EngineConfig; build one from a dict with EngineConfig.from_dict(d)")
        # A kernel reads each layer's pool in place, so pools are per layer (the unrolled layer loop):
        # a layer's slice of a scan-carried stacked pool would be copied for the kernel every step.
        self.attention = resolve_backend(config.attention, config.pallas_interpret)
        mesh = None
        if model is None and config.tp:
            from memloop.engine.model.mesh import make_mesh

            mesh = make_mesh(config.tp)
        self.lm = (
            model
            if model is not None
            else load_model(
                config.model,
                dtype=config.dtype,
                mesh=mesh,
                unroll=True if self.attention.kernel else None,
                quantize=config.quantize,
            )
        )
        if self.attention.kernel and not self.lm.per_layer:
            log.warning(
                "attention backend %s over stacked layers (lax.scan): the kernel reads a copy of each "
                "layer's KV pool per step; load the model with unroll=True to read the pools in place",
                self.attention.kind,
            )
        self.mesh = self.lm.mesh
        self.cfg = self.lm.config
        self.tokenizer = self.lm.tokenizer
        kv_dtype = jnp.dtype(config.kv_dtype or self.lm.dtype)
        layout = KVLayout(
            self.cfg.num_layers,
            self.cfg.num_kv_heads,
            self.cfg.head_dim,
            config.page_size,
            kv_dtype.itemsize,
            scale_bytes=4 if kv_dtype == jnp.int8 else 0,
        )
        self.pool = PagePool(config.num_pages or pages_for_budget(layout, config.kv_budget), config.page_size)
        self.tree = RadixCache(self.pool) if config.prefix_cache else None
        self.scheduler = Scheduler(self.pool, self.tree, config.max_batch, config.prefill_chunk)
        self.max_context = min(config.max_context or self.cfg.max_position_embeddings, self.cfg.max_position_embeddings)
        self.intake = RequestIntake(self.tokenizer, self.pool, self.max_context, self.cfg.vocab_size)
        self._lock = threading.Condition()
        self.runner = StepRunner(
            self.lm,
            self.pool,
            self.tree,
            self.scheduler,
            self._lock,
            self.intake.stop_ids,
            lambda: self.intake.grammar,
            self.attention,
            kv_dtype=kv_dtype,
        )
        self._since = time.perf_counter()  # start of the window the counters and timers cover
        self.loop = StepLoop(self.scheduler, self.runner, self._lock)
        self.scorer = PromptScorer(self.lm)
        self.scoring = ScoringQueue(self.scorer)
        self.weight_path = self.lm.weight_path  # stats (and so a run's provenance) say which path ran

    # -- requests -----------------------------------------------------------------------------------
    @property
    def grammar(self) -> Any:
        """The grammar compiler, built on the first constrained request (about a second)."""
        return self.intake.grammar

    def count_tokens(self, text: str) -> int:
        return self.tokenizer.count_tokens(text)

    def misfit(self, request: dict[str, Any]) -> str | None:
        """Why a request could never be served (too long for the context or the page pool), None if it fits."""
        return self.intake.misfit(request)

    def make_sequence(self, request: dict[str, Any]) -> Sequence:
        """Validate and tokenise a request dict (raises RequestError, never truncates)."""
        return self.intake.make_sequence(request)

    def submit(self, request: dict[str, Any], on_token: Callable[[int, Any], None] | None = None) -> Future:
        """Queue a request; the future resolves to the result dict (or raises RequestError).

        on_token: called on the engine thread, under its lock (so it must be quick and must not raise),
        with each sampled token but the last and its log-probability entry (None unless asked): a
        streamed answer, whose last token comes with the result."""
        try:
            seq = self.intake.make_sequence(request)
        except EngineError as exc:
            fut: Future = Future()
            fut.set_exception(exc)
            return fut
        seq.on_token = on_token
        return self.loop.enqueue(seq)

    def cancel(self, fut: Future) -> None:
        """Drop the request behind `fut` (e.g. its HTTP client went away) at the next step boundary."""
        self.loop.cancel(fut)

    def submit_sequence(self, seq: Sequence) -> Future:
        """Queue a sequence built by `make_sequence` (possibly adjusted); the future as in `submit`."""
        return self.loop.enqueue(seq)

    def complete(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        return self.submit(request).result(timeout)

    def complete_many(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        futs = [self.submit(r) for r in requests]
        return [f.result() for f in futs]

    def score(self, prompts: list[Any], top_n: int, stop: Any = None) -> list[dict[str, Any]]:
        """Per prompt (a string, tokenised as a completion prompt, or a list of token ids), {"ids", "text",
        "entries"}: one entry per prompt token as in a result's `logprobs` (the first token's
        `logprob` and `top_logprobs` None), `top_n` alternatives each. Raises RequestError for a
        prompt that is empty or longer than the model's context, before any work; ScoringCancelled
        once `stop` (a threading.Event) is set."""
        return self.submit_score(prompts, top_n, stop).result()

    def submit_score(self, prompts: list[Any], top_n: int, stop: Any = None) -> Future:
        """Tokenise and check the prompts here (RequestError at once), then queue their scoring; the
        future resolves to `score`'s answer. `cancel_score(fut)` stops it."""
        shown = [self.prompt_text(p) for p in prompts]
        ids = [x["ids"] for x in shown]
        for i, p in enumerate(ids):
            if not p:
                raise RequestError(f"`prompt` {i} is empty after tokenization; send at least one token")
            if len(p) > self.max_context:
                raise RequestError(
                    f"`prompt` {i} ({len(p)} tokens) exceeds the model context of {self.max_context} "
                    "tokens; shorten the prompt (echo scores every prompt token, nothing is truncated)"
                )

        def delivered(entries: list[Any]) -> list[dict[str, Any]]:
            with self._lock:
                self.runner.counters["scored_prompts"] += len(ids)
                self.runner.counters["scored_tokens"] += sum(len(p) for p in ids)
            return [{**x, "entries": e} for x, e in zip(shown, entries)]

        return self.scoring.submit(ids, top_n, stop, delivered)

    def cancel_score(self, fut: Future) -> None:
        """Drop the scoring behind `fut` if it waits, stop it at its next stage if it runs."""
        self.scoring.cancel(fut)

    def prompt_text(self, prompt: Any) -> dict[str, Any]:
        """{"ids", "text"} of a completion prompt (text, or token ids shown as their decoded text): what
        `echo` returns before the completion. Raises RequestError for a malformed prompt."""
        ids = self.intake.prompt_ids({"prompt": prompt})
        return {"ids": ids, "text": prompt if isinstance(prompt, str) else self.tokenizer.decode(ids)}

    # -- state ---------------------------------------------------------------------------------------
    def health(self) -> bool:
        return self.loop.alive()

    def problem(self, stall_s: float) -> str | None:
        """Why the engine cannot make progress (nothing done for `stall_s` seconds while it has work,
        or a part stopped), None when it can. Takes no lock, so it answers while the engine is stuck."""
        return self.loop.problem(stall_s) or self.scoring.problem(stall_s)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self.runner.counters)
            out.update(
                running=len(self.scheduler.running),
                waiting=len(self.scheduler.waiting),
                preemptions=self.scheduler.preemptions,
                backpressure_steps=self.scheduler.backpressure,
                free_pages=self.pool.num_free,
                total_pages=self.pool.capacity,
                page_size=self.pool.page_size,
                prefix_cached_pages=self.tree.num_pages if self.tree else 0,
                compiled_shapes=len(self.runner.shapes),
                prefix_cache=self.tree is not None,
                scoring_running=int(self.scoring.running is not None),
                scoring_queued=self.scoring.queued,
                **self.weight_path,
            )
            out["idle_s"] += self.loop.idle_now()
        out["cache_hit_rate"] = out["cached_tokens"] / out["prompt_tokens"] if out["prompt_tokens"] else 0.0
        # The engine thread's wall time since start (or the last reset) and how it split (step_runner.TIMERS).
        out["wall_s"] = time.perf_counter() - self._since
        for key in TIMERS:
            out[key] = round(out[key], 4)
        return out

    def reset_counters(self) -> None:
        with self._lock:
            for k in self.runner.counters:
                self.runner.counters[k] = 0
            self.loop.restart_clock()
            self._since = time.perf_counter()

    def clear_prefix_cache(self) -> None:
        with self._lock:
            if self.tree is not None:
                self.tree.clear()

    def shutdown(self) -> None:
        self.scoring.close()
        self.loop.stop()
