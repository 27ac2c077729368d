"""A pool of worker threads that runs any unit function over a queue of items, with retries.

Workers are grouped in lanes (one lane per engine actor, `per_lane` threads each); every worker
pulls from one shared queue, so a slow lane takes fewer items. The unit function returns the rows
of a finished item, or a future of them (e.g. judges still running as Ray tasks) so the worker can
take the next item at once. An item that raises a transient error (`retryable`: by default
infrastructure failures, see `memloop.jobs.errors.is_transient`) is retried up to `retries` times; it is
then, like an item whose error is deterministic, recorded at once with the rows `failed_rows` builds,
as the infrastructure's failure: whatever an item's function raises (an endpoint's 401, an error
nobody foresaw) is no result of the method, whose own failures come back as rows, not as exceptions
(`memloop.jobs.errors.INFRASTRUCTURE`); a lane whose backend is gone for good (`lane_lost`) stops and
hands its item back without spending an attempt. Finished rows are buffered and flushed in
batches (every `flush_units` items or `flush_s` seconds, and always at the end or on interrupt).
An item whose rows another process already wrote comes back as that write's record instead of
rows (`Outcome.written`), which the pool hands to `record` at once: nothing of it is buffered.
A flush that fails with a storage error (the store already bounds its retries) stops the pool: the
rows stay in the buffer (`unsaved` counts their items), `storage_error` says why, and what was
flushed before is kept; nothing retries a storage that is down for minutes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from memloop.jobs.errors import ENGINES_LOST, StorageError, error_text, is_transient

T = TypeVar("T")
Rows = dict[str, list[dict[str, Any]]]
Log = Callable[[str], None]


@dataclass(frozen=True)
class Outcome:
    """The rows of one finished item; `error` is set when the item failed, `incomplete` when it finished
    with a part unknown (a judge failed: the unit is ok, its judgment is not)."""

    rows: Rows
    error: str | None = None
    incomplete: str | None = None  # the item finished but part of it is unknown (e.g. a judge failed)
    written: Any = None  # the record of rows already written elsewhere (e.g. a shard a worker committed)


@dataclass(frozen=True)
class Attempt(Generic[T]):
    item: T
    number: int  # 0 for the first attempt
    previous_error: str | None = None


class WorkerPool(Generic[T]):
    def __init__(
        self,
        items: list[T],
        *,
        lanes: int,
        per_lane: int,
        retries: int,
        run: Callable[[Attempt[T], int], "Outcome | Future[Outcome]"],
        failed_rows: Callable[[Attempt[T], str, bool], Rows],
        flush: Callable[[Rows], None],
        describe: Callable[[T], str] = str,
        record: Callable[[Any], None] = lambda written: None,
        retryable: Callable[[BaseException], bool] = is_transient,
        lane_lost: Callable[[BaseException, int], bool] = lambda exc, lane: False,
        flush_units: int = 16,
        flush_s: float = 20.0,
        progress_s: float = 20.0,
        progress: Callable[["WorkerPool[T]"], None] | None = None,
        log: Log = print,
    ) -> None:
        self.total = len(items)
        self.queue: deque[Attempt[T]] = deque(Attempt(it, 0) for it in items)
        self.lanes, self.per_lane, self.retries = lanes, per_lane, retries
        self._run, self._failed_rows, self._flush_to = run, failed_rows, flush
        self._describe, self._lane_lost, self._progress, self.log = describe, lane_lost, progress, log
        self._retryable = retryable
        self._record = record
        self.flush_units, self.flush_s, self.progress_s = flush_units, flush_s, progress_s
        self.cv = threading.Condition()
        self.stop = threading.Event()
        self.finished = 0
        self.failed = 0
        self.infrastructure = 0  # items failed for the infrastructure, or finished with a part unknown
        self.buffer: list[Rows] = []
        self.live = [True] * lanes
        self.errors: list[str] = []  # the final error of each failed item, in order
        self.storage_error: str | None = None  # why a flush failed (the pool stopped there)
        self.buffer_failed: list[bool] = []  # per buffered item: counted in `failed`

    # queue ---------------------------------------------------------------------------------

    def _take(self) -> Attempt[T] | None:
        with self.cv:
            while not self.queue and not self.stop.is_set() and self.finished < self.total:
                self.cv.wait(0.5)
            if self.stop.is_set() or not self.queue:
                return None
            return self.queue.popleft()

    def _put(self, attempt: Attempt[T], front: bool = False) -> None:
        with self.cv:
            (self.queue.appendleft if front else self.queue.append)(attempt)
            self.cv.notify_all()

    def finish(
        self, rows: Rows, failed: bool, error: str | None = None, infrastructure: bool = False, written: Any = None
    ) -> None:
        if written is not None:
            self._record(written)
        with self.cv:
            if rows:
                self.buffer.append(rows)
                self.buffer_failed.append(failed)
            self.finished += 1
            self.failed += int(failed)
            self.infrastructure += int(infrastructure)
            if (failed or infrastructure) and error:
                self.errors.append(error)
            self.cv.notify_all()

    def _attempt_failed(self, a: Attempt[T], exc: BaseException) -> None:
        err = error_text(exc)
        if a.number < self.retries and not self.stop.is_set() and self._retryable(exc):
            self.log(f"retry {a.number + 1}/{self.retries} of {self._describe(a.item)} after {err[:200]}")
            self._put(Attempt(a.item, a.number + 1, err))
            return
        self.log(f"FAILED {self._describe(a.item)} after {a.number + 1} attempt(s): {err[:300]}")
        # raised, not returned: never the method's own result (see the module's docstring)
        self.finish(self._failed_rows(a, err, True), failed=True, error=err, infrastructure=True)

    # workers -------------------------------------------------------------------------------

    def _worker(self, lane: int) -> None:
        while self.live[lane] and (a := self._take()) is not None:
            try:
                if not self._work(a, lane):
                    break
            except Exception as exc:  # recording the item failed: counted, so the pool never waits on it
                self._unrecorded(a, exc)
        if not any(self.live) and not self.stop.is_set():
            self._fail_remaining(f"{ENGINES_LOST} and could not be restarted (engine.max_restarts)")

    def _work(self, a: Attempt[T], lane: int) -> bool:
        """Run one attempt and record its outcome; False when this worker stops."""
        try:
            result = self._run(a, lane)
        except Exception as exc:  # recorded with the item, never dropped
            if self.stop.is_set():  # interrupted: the item stays unrecorded and a resume computes it
                return False
            if self._lane_lost(exc, lane):
                self.live[lane] = False
                self._put(a, front=True)  # back to the queue without spending an attempt
                return False
            self._attempt_failed(a, exc)
            return True
        if isinstance(result, Future):
            result.add_done_callback(lambda f, a=a: self._resolved(a, f))
        else:
            self._finished(result)
        return True

    def _unrecorded(self, a: Attempt[T], exc: BaseException) -> None:
        """An item whose failure could not be turned into rows (a bug): counted failed with no rows
        (a resume computes it again) and its error kept, instead of a worker dying with the item pending."""
        err = f"{self._describe(a.item)} could not be recorded: {error_text(exc)}"
        self.log(f"FAILED {err[:300]}")
        self.finish({}, failed=True, error=err, infrastructure=True)

    def _finished(self, out: Outcome) -> None:
        self.finish(
            out.rows,
            failed=out.error is not None,
            error=out.error or out.incomplete,
            infrastructure=out.incomplete is not None,
            written=out.written,
        )

    def _resolved(self, a: Attempt[T], fut: "Future[Outcome]") -> None:
        """A deferred outcome, or the failure its future raised (recorded, not retried; the infrastructure's)."""
        try:
            try:
                out = fut.result()
            except Exception as exc:
                err = error_text(exc)
                self.finish(self._failed_rows(a, err, True), failed=True, error=err, infrastructure=True)
                return
            self._finished(out)
        except Exception as exc:  # a callback's error would vanish inside the future: count the item
            self._unrecorded(a, exc)

    def _fail_remaining(self, reason: str) -> None:
        while True:
            with self.cv:
                if not self.queue:
                    return
                a = self.queue.popleft()
            try:
                self.finish(self._failed_rows(a, reason, True), failed=True, error=reason, infrastructure=True)
            except Exception as exc:
                self._unrecorded(a, exc)

    # main loop -----------------------------------------------------------------------------

    @property
    def unsaved(self) -> int:
        """Finished items whose rows are not written (a storage error stopped the flushes)."""
        with self.cv:
            return len(self.buffer)

    @property
    def unsaved_failed(self) -> int:
        """Of the unsaved items, those counted as failed."""
        with self.cv:
            return sum(self.buffer_failed)

    def flush(self) -> None:
        with self.cv:
            batch, self.buffer = self.buffer, []
            flags, self.buffer_failed = self.buffer_failed, []
        if not batch:
            return
        merged: Rows = {}
        for rows in batch:
            for table, rs in rows.items():
                merged.setdefault(table, []).extend(rs)
        try:
            self._flush_to(merged)
        except StorageError as exc:
            with self.cv:  # kept in order, and counted as unsaved
                self.buffer[:0] = batch
                self.buffer_failed[:0] = flags
            self.storage_error = error_text(exc)
            self.log(f"stopping: the results could not be written ({self.storage_error[:400]})")
            self.stop.set()

    def run(self) -> tuple[int, int]:
        """Run every item; returns (succeeded, failed). Rows are flushed also on interrupt."""
        threads = [
            threading.Thread(target=self._worker, args=(lane,), daemon=True, name=f"unit-{lane}-{k}")
            for lane in range(self.lanes)
            for k in range(self.per_lane)
        ]
        for t in threads:
            t.start()
        last_flush = last_progress = time.monotonic()
        last_count = 0
        try:
            while True:
                with self.cv:
                    done = self.finished >= self.total
                    self.cv.wait(0.5)
                    pending = len(self.buffer)
                t = time.monotonic()
                if pending and (done or pending >= self.flush_units or t - last_flush >= self.flush_s):
                    self.flush()
                    last_flush = t
                if done or self.stop.is_set():  # all finished, or stopped from outside (e.g. the run lock lost)
                    break
                if self._progress and (self.finished != last_count or t - last_progress >= self.progress_s):
                    self._progress(self)
                    last_progress, last_count = t, self.finished
        finally:
            self.stop.set()
            with self.cv:
                self.cv.notify_all()
            if self.storage_error is None:  # a store that just failed is not waited on again
                self.flush()  # whatever finished is kept, also on interrupt
        return self.finished - self.failed, self.failed
