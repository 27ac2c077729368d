"""Continuous batching: which sequences run in the next engine step, and with which pages.

Between two steps requests join (admission from a FIFO queue) and leave (finish); each step decodes
one token for every running sequence and spends a bounded token budget on prompt chunks (chunked
prefill), so a long prompt never stalls the others. Memory is the page pool: a request is admitted
only when its prompt pages fit (after evicting unreferenced prefix-cache pages), otherwise it waits
(back-pressure); when a decoding sequence needs a page and none is left, the youngest sequence is
preempted and later recomputed -- its pages go to the prefix cache first, so recomputing is mostly
cache hits. Nothing is ever truncated. This module is pure Python over `PagePool` and `RadixCache`;
`memloop.engine.runner.step_runner` executes the plans it returns.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from memloop.engine.cache.kv_cache import PagePool, pages_needed
from memloop.engine.cache.radix import RadixCache

_arrivals = itertools.count()


class Status(enum.Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One request's token state and its pages."""

    prompt: list[int]
    max_tokens: int
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    params: Any = None  # memloop.engine.sample.sampling.SamplingParams (validated settings)
    key: Any = None  # raw uint32[2] PRNG key of the request's seed
    stop_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    constraint: Any = None  # memloop.engine.sample.constrained.Constraint
    logprobs: int | None = None  # alternatives asked per output token (None: no log-probabilities)
    output: list[int] = field(default_factory=list)
    # per output token when `logprobs` is set: (its log-probability, [(id, log-probability)] of the top ones)
    token_logprobs: list[tuple[float, list[tuple[int, float]]]] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)
    computed: int = 0  # leading tokens whose keys/values are in `pages`
    cached_tokens: int | None = None  # prompt tokens served from the prefix cache (first admission)
    status: Status = Status.WAITING
    finish_reason: str | None = None
    text: str | None = None
    handle: Any = None  # the engine's completion handle
    # called on the engine thread, under its lock, with (token id, its `token_logprobs` entry or None)
    # for each sampled token but the last (a streamed answer; the result carries the last one)
    on_token: Any = None
    arrival: int = field(default_factory=lambda: next(_arrivals))

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def prefill_target(self) -> int:
        """Tokens to compute before decoding: the prompt, or after a preemption everything but the last token."""
        return len(self.prompt) if not self.output else len(self.prompt) + len(self.output) - 1


@dataclass(frozen=True)
class PrefillChunk:
    seq: Sequence
    start: int
    length: int

    @property
    def final(self) -> bool:
        return self.start + self.length == self.seq.prefill_target


@dataclass
class StepPlan:
    decode: list[Sequence]
    prefill: list[PrefillChunk]

    def __bool__(self) -> bool:
        return bool(self.decode or self.prefill)


class Scheduler:
    def __init__(self, pool: PagePool, tree: RadixCache | None, max_batch: int, prefill_budget: int) -> None:
        self.pool = pool
        self.tree = tree
        self.ps = pool.page_size
        self.max_batch = max_batch
        self.prefill_budget = prefill_budget
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0
        self.backpressure = 0  # steps in which a request waited because the pool was full

    # -- queue ------------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- admission ----------------------------------------------------------------------------------
    def _pending_share(self, seq: Sequence, matched_pages: int) -> bool:
        """A sequence in prefill will soon cache more of `seq`'s prompt than the tree holds now."""
        tokens = seq.tokens[: seq.prefill_target]
        for other in self.running:
            if other.status is not Status.PREFILL:
                continue
            limit = min(len(tokens), other.prefill_target) // self.ps * self.ps
            common = 0
            ot = other.tokens
            while common < limit and ot[common : common + self.ps] == tokens[common : common + self.ps]:
                common += self.ps
            if common // self.ps > matched_pages:
                return True
        return False

    def _try_admit(self, seq: Sequence) -> bool | None:
        """Admit `seq` if its pages fit; None means 'wait for a sharing prefill to land first'."""
        target = seq.prefill_target
        matched: list[int] = []
        if self.tree is not None:
            # at least one token must be computed to get the next-token logits
            matched = self.tree.match(seq.tokens[:target])[: (target - 1) // self.ps]
            if self._pending_share(seq, len(matched)):
                return None
        need = pages_needed(target, self.ps) - len(matched)
        self.pool.incref(matched)
        short = need - self.pool.num_free
        if short > 0 and self.tree is not None and self.tree.evictable_pages() >= short:
            self.tree.evict(short)
        if need > self.pool.num_free:
            self.pool.decref(matched)
            return False
        seq.pages = matched + self.pool.alloc(need)
        seq.computed = len(matched) * self.ps
        if seq.cached_tokens is None:
            seq.cached_tokens = min(seq.computed, len(seq.prompt))
        seq.status = Status.PREFILL
        self.running.append(seq)
        return True

    def _admit(self) -> None:
        deferred: list[Sequence] = []
        while self.waiting and len(self.running) < self.max_batch:
            seq = self.waiting.popleft()
            ok = self._try_admit(seq)
            if ok is None:
                deferred.append(seq)
                continue
            if not ok:  # back-pressure: the pool is full; keep FIFO order
                self.waiting.appendleft(seq)
                self.backpressure += 1
                break
        self.waiting.extendleft(reversed(deferred))

    # -- pages for decoding ---------------------------------------------------------------------------
    def _release(self, seq: Sequence) -> None:
        """Give `seq`'s pages back, caching the ones fully computed."""
        if self.tree is not None and seq.computed >= self.ps:
            self.tree.insert(seq.tokens[: seq.computed], seq.pages[: seq.computed // self.ps])
        self.pool.decref(seq.pages)
        seq.pages = []

    def _preempt(self, victim: Sequence) -> None:
        self._release(victim)
        victim.computed = 0
        victim.status = Status.WAITING
        self.running.remove(victim)
        self.waiting.appendleft(victim)
        self.preemptions += 1

    def _grow(self, seq: Sequence) -> bool:
        """Make room for `seq`'s next token; False if `seq` itself had to be preempted."""
        while len(seq.tokens) > len(seq.pages) * self.ps:
            if self.pool.num_free == 0 and self.tree is not None:
                self.tree.evict(1)
            if self.pool.num_free > 0:
                seq.pages.extend(self.pool.alloc(1))
                continue
            victim = max(self.running, key=lambda s: s.arrival)
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    # -- the plan ------------------------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        self._admit()
        decode = []
        for seq in sorted(self.running, key=lambda s: s.arrival):
            if seq.status is Status.DECODE and seq in self.running and self._grow(seq):
                decode.append(seq)
        decode = [s for s in decode if s in self.running]
        prefill = []
        budget = self.prefill_budget
        for seq in self.running:
            if seq.status is not Status.PREFILL or budget <= 0:
                continue
            n = min(seq.prefill_target - seq.computed, budget)
            prefill.append(PrefillChunk(seq, seq.computed, n))
            budget -= n
        return StepPlan(decode, prefill)

    # -- results -------------------------------------------------------------------------------------
    def prefilled(self, chunk: PrefillChunk) -> None:
        """Keys/values of the chunk are written; share its whole pages through the prefix cache."""
        seq = chunk.seq
        seq.computed = chunk.start + chunk.length
        if self.tree is not None and seq.computed >= self.ps:
            self.tree.insert(seq.tokens[: seq.computed], seq.pages[: seq.computed // self.ps])
        if chunk.final:
            seq.status = Status.DECODE

    def decoded(self, seq: Sequence) -> None:
        seq.computed += 1

    def finish(self, seq: Sequence, reason: str) -> None:
        self._release(seq)
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        self.running.remove(seq)

    def abort_all(self) -> list[Sequence]:
        """Drop every sequence (after an internal failure); returns them so their callers can be told."""
        seqs = list(self.running) + list(self.waiting)
        for seq in self.running:
            self.pool.decref(seq.pages)
            seq.pages = []
        self.running.clear()
        self.waiting.clear()
        return seqs
