"""The step loop: one background thread that plans and runs engine steps while requests arrive.

Callers on any thread `enqueue` a `Sequence` whose `handle` is a `Future`; the loop sleeps until
there is work, asks the scheduler for a plan, hands it to the `StepRunner`, and repeats. Futures are
resolved by the runner (results, per-request failures) or here (shutdown, engine-wide failures).

`problem(bound_s)` names a loop that cannot make progress (for `/health`): stopped, one step running
longer than `bound_s`, or requests in the engine and no step for that long (e.g. its lock held, or
waiting for pages that never free). It reads plain attributes, never the lock, so it answers while
the loop is stuck.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future

from memloop.engine.errors import EngineError, RequestError
from memloop.engine.runner.step_runner import StepRunner
from memloop.engine.sched.scheduler import Scheduler, Sequence

log = logging.getLogger(__name__)


class StepLoop:
    def __init__(self, scheduler: Scheduler, runner: StepRunner, lock: threading.Condition) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.lock = lock
        self.stopped = False
        self._cancelled: set[Future] = set()
        self._device_before = 0.0  # the runner's device seconds when the current step began
        self._reset_at = 0.0  # when the timers were last zeroed (perf_counter)
        self.waiting_since: float | None = None  # the loop has been idle since then (None: busy)
        self.progress_at = time.monotonic()  # the loop last finished a step, or got work while idle
        self.step_since: float | None = None  # a step has been running since then (None: none)
        self.thread = threading.Thread(target=self._loop, name="memloop-engine", daemon=True)
        self.thread.start()

    def enqueue(self, seq: Sequence) -> Future:
        """Queue a validated sequence; returns its future (`seq.handle`, created if missing)."""
        if seq.handle is None:
            seq.handle = Future()
        seq.handle.set_running_or_notify_cancel()  # only `cancel` below stops a request, between two steps
        with self.lock:
            if self.stopped:
                raise EngineError("the engine is shut down; create a new one")
            if self.waiting_since is not None:  # an idle loop's stall clock starts with its work
                self.progress_at = time.monotonic()
            self.scheduler.add(seq)
            self.lock.notify()
        return seq.handle

    def cancel(self, fut: Future) -> None:
        """Drop the request behind `fut` (its client went away) at the next step boundary."""
        with self.lock:
            if not fut.done():
                self._cancelled.add(fut)
                self.lock.notify()

    def _drop_cancelled(self) -> None:
        """Take cancelled requests out of the batch and the queue (under the lock, between steps)."""
        if not self._cancelled:
            return
        for seq in [s for s in [*self.scheduler.running, *self.scheduler.waiting] if s.handle in self._cancelled]:
            if seq in self.scheduler.running:
                self.scheduler.finish(seq, "cancelled")
            else:
                self.scheduler.waiting.remove(seq)
            self.runner.counters["cancelled_requests"] += 1
            seq.handle.set_exception(RequestError("the request was cancelled"))
        self._cancelled.clear()

    def alive(self) -> bool:
        return self.thread.is_alive() and not self.stopped

    def problem(self, bound_s: float) -> str | None:
        """Why the loop cannot make progress, or None (see the module's docstring)."""
        if not self.alive():
            return "the engine's step loop has stopped; restart the server"
        now, step_since = time.monotonic(), self.step_since
        if step_since is not None and now - step_since > bound_s:
            return (
                f"the engine has made no progress for {now - step_since:.0f} s: one step has run that long "
                f"(the bound is {bound_s:g} s)"
            )
        work = len(self.scheduler.running) + len(self.scheduler.waiting)
        quiet = now - self.progress_at
        if work and step_since is None and quiet > bound_s:
            return (
                f"the engine has made no progress for {quiet:.0f} s: {work} requests are in it and no step "
                f"ran (the bound is {bound_s:g} s)"
            )
        return None

    def stop(self, timeout: float = 30) -> None:
        with self.lock:
            self.stopped = True
            self.lock.notify()
        self.thread.join(timeout=timeout)

    def _clock(self, idle: float, busy: float) -> None:
        """Charge `idle` seconds to waiting and the part of `busy` the device steps did not take to the host
        (`StepRunner.forward` charges the steps themselves); under the lock."""
        c = self.runner.counters
        c["idle_s"] += idle
        c["host_s"] += max(0.0, busy - (c["compute_s"] + c["compile_s"] - self._device_before))

    def idle_now(self) -> float:
        """Seconds of the idle stretch in progress not yet charged (under the lock)."""
        if self.waiting_since is None:
            return 0.0
        return max(0.0, time.perf_counter() - max(self.waiting_since, self._reset_at))

    def restart_clock(self) -> None:
        """The timers were zeroed (under the lock): a step in flight charges only what follows."""
        self._device_before = 0.0
        self._reset_at = time.perf_counter()

    def _loop(self) -> None:
        while True:
            with self.lock:
                waited = self.waiting_since = time.perf_counter()
                while not self.stopped and not self.scheduler.has_work():
                    self.lock.wait()
                start = time.perf_counter()
                self.waiting_since = None
                self._clock(start - max(waited, self._reset_at), 0.0)
                self._device_before = self.runner.counters["compute_s"] + self.runner.counters["compile_s"]
                if self.stopped:
                    for seq in self.scheduler.abort_all():
                        seq.handle.set_exception(EngineError("the engine was shut down before this request finished"))
                    return
                try:
                    self._drop_cancelled()
                    plan = self.scheduler.schedule()
                except Exception as exc:  # a scheduler bug must not hang every caller
                    log.exception("engine scheduling failed")
                    self.fail_all(exc)
                    continue
            if not plan:  # waiting for pages to free up
                time.sleep(0.001)
                with self.lock:
                    self._clock(time.perf_counter() - max(start, self._reset_at), 0.0)
                continue
            self.step_since = time.monotonic()
            try:
                self.runner.execute(plan)  # a request's own failure is settled inside; what escapes is engine-wide
            except Exception as exc:
                log.exception("engine step failed")
                with self.lock:
                    self.fail_all(exc)
                    if self.runner.cache_lost():
                        self.runner.reset_cache()
            finally:
                self.step_since = None
                self.progress_at = time.monotonic()
            with self.lock:
                self._clock(0.0, time.perf_counter() - max(start, self._reset_at))

    def fail_all(self, exc: BaseException) -> None:
        """Abort every running and waiting request (engine-wide failures only; called under the lock)."""
        for seq in self.scheduler.abort_all():
            self.runner.counters["failed_requests"] += 1
            if not seq.handle.done():
                seq.handle.set_exception(EngineError(f"engine step failed: {type(exc).__name__}: {exc}"))
