"""The scoring queue: prompt scoring calls run one at a time on one thread of their own, in order.

Callers queue a job and get a `Future`; a waiting job holds no thread, so abandoned scoring cannot
fill a thread pool that other work needs (the server used to block a worker thread per scoring
request on the scorer's lock). `cancel` drops a waiting job at once, or stops a running one at its
next stage (`PromptScorer.score`'s `stop`), and the job's arrays go with it. `problem(bound_s)`
names a scorer that has work and has made no progress for `bound_s` seconds (`/health`'s 503).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Sequence

from memloop.engine.errors import EngineError, ScoringCancelled
from memloop.engine.runner.prompt_scoring import PromptScorer


@dataclasses.dataclass(eq=False)
class _Job:
    prompts: Sequence[Sequence[int]]
    top_n: int
    finish: Callable[[list[Any]], Any]
    stop: threading.Event
    future: Future


class ScoringQueue:
    def __init__(self, scorer: PromptScorer) -> None:
        self.scorer = scorer
        self._jobs: collections.deque[_Job] = collections.deque()
        self._by_future: dict[Future, _Job] = {}
        self._cv = threading.Condition()
        self._closed = False
        self.running: _Job | None = None
        self.progress_at = time.monotonic()  # the last stage finished, job taken or work arriving when idle
        self.thread = threading.Thread(target=self._loop, name="memloop-scorer", daemon=True)
        self.thread.start()

    def submit(
        self,
        prompts: Sequence[Sequence[int]],
        top_n: int,
        stop: threading.Event | None = None,
        finish: Callable[[list[Any]], Any] = lambda entries: entries,
    ) -> Future:
        """Queue a scoring of token-id prompts; the future resolves to `finish(entries)` (computed on the
        scorer's thread), or raises ScoringCancelled once cancelled or once `stop` is set."""
        job = _Job(prompts, top_n, finish, stop or threading.Event(), Future())
        with self._cv:
            if self._closed:
                raise EngineError("the engine is shut down; create a new one")
            if self.running is None and not self._jobs:
                self.progress_at = time.monotonic()  # an idle scorer's stall clock starts with its work
            self._jobs.append(job)
            self._by_future[job.future] = job
            self._cv.notify()
        return job.future

    def cancel(self, fut: Future) -> None:
        """Stop the job behind `fut`: dropped from the queue if it waits, stopped at its next stage if it
        runs; nothing if it is done."""
        with self._cv:
            job = self._by_future.pop(fut, None)
            if job is None:
                return
            job.stop.set()
            waiting = job is not self.running
            if waiting:
                self._jobs.remove(job)
        if waiting and job.future.set_running_or_notify_cancel():  # it never started: answer it now
            job.future.set_exception(ScoringCancelled("the scoring request was abandoned before it started"))

    @property
    def queued(self) -> int:
        return len(self._jobs)

    def problem(self, bound_s: float) -> str | None:
        """Why the scorer cannot make progress (it has work, and none for `bound_s` seconds), or None."""
        busy = self.running is not None or bool(self._jobs)
        if not busy:
            return None
        if not self.thread.is_alive():
            return "the prompt scorer's thread has stopped; restart the server"
        quiet = time.monotonic() - self.progress_at
        if quiet <= bound_s:
            return None
        what = "one stage of a scoring call" if self.running is not None else "starting the next scoring call"
        return (
            f"the prompt scorer has made no progress for {quiet:.0f} s ({what}; {self.queued} scoring requests "
            f"waiting; the bound is {bound_s:g} s)"
        )

    def close(self) -> None:
        """Stop the thread; waiting jobs fail, a running one stops at its next stage."""
        with self._cv:
            self._closed = True
            waiting, self._jobs = list(self._jobs), collections.deque()
            self._by_future.clear()
            if self.running is not None:
                self.running.stop.set()
            self._cv.notify()
        for job in waiting:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(EngineError("the engine was shut down before this scoring ran"))

    def _beat(self) -> None:
        self.progress_at = time.monotonic()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._jobs:
                    self._cv.wait()
                if self._closed:
                    return
                job = self.running = self._jobs.popleft()
                self._beat()
            try:
                if job.future.set_running_or_notify_cancel():
                    self._run(job)
            finally:
                with self._cv:
                    self.running = None
                    self._by_future.pop(job.future, None)
                    self._beat()

    def _run(self, job: _Job) -> None:
        try:
            entries = self.scorer.score(job.prompts, job.top_n, job.stop, self._beat)
            result = job.finish(entries)
        except BaseException as exc:  # the caller's future carries it; the thread goes on
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)
